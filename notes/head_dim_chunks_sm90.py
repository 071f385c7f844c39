"""Registers, spills and shared memory of the portable kernels at head dims 96 and 192 for sm_90, in column
chunks against padded (no GPU needed: tests/sm90_compile.py compiles the recorded launches with ptxas).

    PYTHONPATH=. python3 notes/head_dim_chunks_sm90.py > notes/round18/head_dim_chunks_sm90.txt

Default tiles, forward and backward (fp16, 1 x 2 heads x 1024 keys), full and causal, chunked
(`kernels.tiles.CHUNKED_HEAD_DIMS = True`) and padded; then the forward at d192 and d96 under a few other tile
configs, chunked and padded.
"""
import sys

import torch

sys.path.insert(0, "tests")
import sm90_compile  # noqa: E402

import kernels.tiles as tiles  # noqa: E402
from kernels import TileConfig, flash_attention  # noqa: E402


def qkv(head_dim, grad=True):
    return [torch.randn(1, 2, 1024, head_dim, dtype=torch.float16, requires_grad=grad) for _ in range(3)]


def report(label, launches):
    for launch in launches:
        if "delta" in launch.kernel.__name__:
            continue
        c = sm90_compile.compile_sm90(launch)
        print(f"{label:<44}{c.name:<16}{c.num_warps:>6}{c.num_stages:>7}{c.registers:>6}{c.spill_bytes:>8}"
              f"{c.shared_bytes / 1024:>9.0f}", flush=True)


def main():
    print(f"{'case':<44}{'kernel':<16}{'warps':>6}{'stages':>7}{'regs':>6}{'spill B':>8}{'smem KiB':>9}")
    for head_dim in (96, 192):
        for chunked in (True, False):
            tiles.CHUNKED_HEAD_DIMS = chunked
            for causal in (False, True):
                label = f"d{head_dim} {'chunks' if chunked else 'padded'} {'causal' if causal else 'full'} default"
                report(label, sm90_compile.launches_of(flash_attention, *qkv(head_dim), causal=causal, hopper=False,
                                                       hopper_backward=False))
    for head_dim in (96, 192):
        for chunked in (True, False):
            tiles.CHUNKED_HEAD_DIMS = chunked
            for config in ((64, 64, 4, 2), (128, 64, 8, 2), (128, 32, 8, 2), (64, 32, 4, 2)):
                label = f"d{head_dim} {'chunks' if chunked else 'padded'} causal fwd {'x'.join(map(str, config))}"
                report(label, sm90_compile.launches_of(flash_attention, *qkv(head_dim, grad=False), causal=True,
                                                       hopper=False, fwd_tiles=TileConfig(*config)))
    tiles.CHUNKED_HEAD_DIMS = True


if __name__ == "__main__":
    main()
