"""Sweep the Hopper forward's key tile and ring depth (kernels/_hopper.py) on the H200, fp16.

    python3 notes/hopper_fwd_tiles.py OUT.csv [--passes 2]

Each (BLOCK_N, STAGES) is first checked against the float64 reference on a small odd shape (the
test rule: at most twice PyTorch's fp16 error, plus 1e-5), then timed (triton.testing.do_bench
median) on the paper's shapes at 4k and 16k beside the default config and cuDNN. Rows: pass,
head dim, causal, seqlen, block_n, stages, ok (the check), ms, TFLOP/s.
"""
import argparse
import csv
import sys
from pathlib import Path

import torch
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kernels import attention_reference  # noqa: E402
from kernels._hopper import hopper_forward  # noqa: E402

CONFIGS = {64: [(128, 3), (128, 2), (64, 3), (64, 4)], 128: [(128, 2), (64, 3), (64, 4), (128, 3)]}


def check(head_dim, block_n, stages, causal):
    q, k, v = (torch.randn(1, 4, 1000, head_dim, device="cuda", dtype=torch.float16) for _ in range(3))
    out, _ = hopper_forward(q, k, v, head_dim ** -0.5, causal, block_n=block_n, stages=stages)
    ref, _ = attention_reference(q, k, v, causal=causal)
    low, _ = attention_reference(q, k, v, causal=causal, upcast=False)
    return (out.double() - ref).abs().max().item() <= 2 * (low.double() - ref).abs().max().item() + 1e-5


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--passes", type=int, default=2)
    args = parser.parse_args()
    with open(args.out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["pass", "head_dim", "causal", "seqlen", "block_n", "stages", "ok", "ms", "tflops"])
        for p in range(args.passes):
            for head_dim, configs in CONFIGS.items():
                for causal in (False, True):
                    for n in (4096, 16384):
                        batch, heads = 16384 // n, 2048 // head_dim
                        q, k, v = (torch.randn(batch, heads, n, head_dim, device="cuda", dtype=torch.float16)
                                   for _ in range(3))
                        flops = 4 * batch * heads * n * n * head_dim / (2 if causal else 1)
                        for block_n, stages in configs + [(0, 0)]:
                            if block_n:
                                try:
                                    ok = check(head_dim, block_n, stages, causal)
                                    fn = (lambda bn=block_n, st=stages:
                                          hopper_forward(q, k, v, head_dim ** -0.5, causal, block_n=bn, stages=st))
                                    ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
                                except Exception as error:  # out of shared memory: a row, not a crash
                                    print(f"d{head_dim} {block_n}x{stages}: {type(error).__name__}: {error}"[:300])
                                    ok, ms = False, float("nan")
                            else:  # cuDNN beside it
                                ok = True

                                def fn():
                                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                                        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
                                ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
                            writer.writerow([p, head_dim, int(causal), n, block_n, stages, int(ok), f"{ms:.4f}",
                                             f"{flops / ms / 1e9:.1f}"])
                            f.flush()
                            print(p, head_dim, int(causal), n, block_n, stages, int(ok), f"{flops / ms / 1e9:.0f}",
                                  flush=True)


if __name__ == "__main__":
    main()
