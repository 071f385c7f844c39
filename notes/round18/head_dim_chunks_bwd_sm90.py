"""Backward tile candidates at d96/d192 in chunks: registers, spills, shared memory at sm_90 (no GPU).

    PYTHONPATH=. python3 notes/round18/head_dim_chunks_bwd_sm90.py > notes/round18/head_dim_chunks_bwd_sm90.txt
"""
import sys
sys.path.insert(0, "tests")
sys.path.insert(0, "notes")
import sm90_compile
import head_dim_chunks_sm90 as h
from kernels import TileConfig, flash_attention
print("case kernel warps stages regs spill smem")
for hd in (192, 96):
    for causal in (True, False):
        for cfg in ((64, 64, 8, 2), (32, 128, 8, 2), (64, 128, 8, 2), (32, 64, 4, 2), (64, 64, 4, 2)):
            if hd == 192 and cfg[1] == 128 and cfg[0] == 64: continue
            h.report(f"d{hd} chunks {'causal' if causal else 'full'} bwd {'x'.join(map(str, cfg))}",
                     [l for l in sm90_compile.launches_of(flash_attention, *h.qkv(hd), causal=causal, hopper=False,
                      hopper_backward=False, bwd_tiles=TileConfig(*cfg)) if "bwd" in l.kernel.__name__])
