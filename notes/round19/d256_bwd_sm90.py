"""The portable backward's tile candidates at head dim 256: registers, spills, shared memory at sm_90 (no GPU).

    PYTHONPATH=. python3 notes/round19/d256_bwd_sm90.py > notes/round19/d256_bwd_sm90.txt

tests/sm90_compile.py's recorder and ptxas, fp16, 1 x 2 heads x 1024 keys, full and causal; the default is
32 x 64 x 8 x 2 (kernels/tiles.py). notes/round19/hopper_head_dims_probe.py times the candidates on the H200.
"""
import sys

sys.path.insert(0, "tests")
sys.path.insert(0, "notes")
import head_dim_chunks_sm90 as h  # noqa: E402
import sm90_compile  # noqa: E402

from kernels import TileConfig, flash_attention  # noqa: E402

CONFIGS = ((32, 64, 8, 2), (64, 64, 8, 2), (64, 64, 8, 1), (32, 128, 8, 2), (64, 32, 8, 2), (32, 64, 8, 1),
           (64, 128, 8, 1))

print("case kernel warps stages regs spill smem", flush=True)
for causal in (False, True):
    for config in CONFIGS:
        h.report(f"d256 {'causal' if causal else 'full'} bwd {'x'.join(map(str, config))}",
                 [launch for launch in sm90_compile.launches_of(flash_attention, *h.qkv(256), causal=causal,
                                                                hopper=False, hopper_backward=False,
                                                                bwd_tiles=TileConfig(*config))
                  if "bwd" in launch.kernel.__name__])
