"""The Hopper forward with ALiBi, softcap and both against plain, for one tree's kernels (v32's probe).

    PYTHONPATH=. python3 notes/round28/feature_fwd_probe.py LABEL >> OUT.csv      (an sm_90 GPU)

Run it on two trees in one device call, alternating, to compare them (as notes/round28/run_v31_h100.sh does for
softcap_fwd_probe.py). fp16, batch x seqlen = 16k tokens, 2048 // head dim heads, head dims 64 and 128, seqlens
4k and 16k, full and causal; forward (hopper=True) and forward+backward (the default backward) of each feature.
ALiBi slopes are flash-attn's for the heads (2^(-8 h / H)). triton.testing.do_bench median.
CSV rows (no header): label,head_dim,causal,seqlen,feature,mode,ms."""
import sys

import torch
from triton.testing import do_bench

from kernels import flash_attention

label = sys.argv[1]
for head_dim in (64, 128):
    heads = 2048 // head_dim
    slopes = torch.tensor([2 ** (-8 * (h + 1) / heads) for h in range(heads)], device="cuda", dtype=torch.float32)
    for seqlen in (4096, 16384):
        q, k, v, do = (torch.randn(16384 // seqlen, heads, seqlen, head_dim, device="cuda", dtype=torch.float16,
                                   requires_grad=i < 3) for i in range(4))
        for causal in (False, True):
            for feature, kwargs in (("plain", {}), ("alibi", dict(alibi_slopes=slopes)),
                                    ("softcap30", dict(softcap=30.0)),
                                    ("softcap30_alibi", dict(softcap=30.0, alibi_slopes=slopes))):
                for mode in ("fwd", "fwd_bwd"):
                    def step():
                        if mode == "fwd":
                            with torch.no_grad():
                                flash_attention(q, k, v, causal=causal, hopper=True, **kwargs)
                        else:
                            o = flash_attention(q, k, v, causal=causal, hopper=True, **kwargs)
                            torch.autograd.grad(o, (q, k, v), do)
                    ms = do_bench(step, warmup=25, rep=100)
                    print(f"{label},{head_dim},{int(causal)},{seqlen},{feature},{mode},{ms:.4f}", flush=True)
