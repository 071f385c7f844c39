"""The d256 backward tile candidates' spills at sm_90 (no GPU) at a ragged length (200) and at 1024 keys, plain, causal,
and causal with every training feature: tile, case, kernel, registers, spill bytes, shared KiB.
  PYTHONPATH=. python3 notes/round19/d256_bwd_spills_ragged_sm90.py > notes/round19/d256_bwd_spills_ragged_sm90.txt
"""
import sys
sys.path.insert(0, "tests")
import sm90_compile, torch
from kernels import TileConfig, flash_attention
every = dict(window_size=(50, 0), softcap=10.0, alibi_slopes=torch.rand(2), dropout_p=0.1)
def qkv(n):
    return [torch.randn(1, 2, n, 256, dtype=torch.float16, requires_grad=True) for _ in range(3)]
for cfg in ((128, 32, 8, 2), (64, 64, 8, 2), (32, 64, 8, 2)):
    for label, n, kw in (("ragged200", 200, {}), ("1024", 1024, {}), ("1024 causal", 1024, dict(causal=True)), ("ragged200 causal every", 200, dict(causal=True, **every))):
        for launch in sm90_compile.launches_of(flash_attention, *qkv(n), hopper=False, hopper_backward=False, bwd_tiles=TileConfig(*cfg), **kw):
            if "bwd_dkdv" in launch.kernel.__name__ or "bwd_dq" in launch.kernel.__name__:
                c = sm90_compile.compile_sm90(launch)
                print("x".join(map(str, cfg)), label, c.name, c.registers, c.spill_bytes, round(c.shared_bytes/1024), flush=True)
