"""Python-side cost of the op with every Triton launch replaced by a no-op (CPU, interpreter flag on).

    TRITON_INTERPRET=1 PYTHONPATH=. python notes/host_layers_profile.py

Separates our own layers (checks, autograd.Function, torch.library custom ops) from Triton's launcher.
"""
import time, torch
import kernels._forward as F_, kernels._backward as B_
from kernels import flash_attention
class Dummy:
    def __getitem__(self, grid): return lambda *a, **k: None
for m, names in ((F_, ["_attn_fwd"]), (B_, ["_attn_bwd_delta", "_attn_bwd_dkdv", "_attn_bwd_dq"])):
    for n in names: setattr(m, n, Dummy())
q, k, v = (torch.randn(1, 1, 128, 64, dtype=torch.float16, requires_grad=True) for _ in range(3))
o = flash_attention(q, k, v, causal=True); do = torch.randn_like(o)
def fwd():
    with torch.no_grad(): flash_attention(q, k, v, causal=True)
def fb(): torch.autograd.grad(flash_attention(q, k, v, causal=True), (q, k, v), do)
for name, fn in (("fwd", fwd), ("fwd_bwd", fb)):
    for _ in range(50): fn()
    t = time.perf_counter(); N = 2000
    for _ in range(N): fn()
    print(name, "%.1f us/call" % ((time.perf_counter() - t) / N * 1e6))
import cProfile, pstats
cProfile.run("for _ in range(300): fb()", "/tmp/prof")
pstats.Stats("/tmp/prof").sort_stats("cumtime").print_stats(18)
