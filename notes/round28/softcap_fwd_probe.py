"""The Hopper forward with and without softcap, and softcap's forward+backward, for one tree's kernels.

    PYTHONPATH=. python3 notes/round28/softcap_fwd_probe.py LABEL >> OUT.csv      (an sm_90 GPU)

Run it on two trees in one device call, alternating, to compare them. fp16, batch x seqlen = 16k tokens,
2048 // head dim heads, head dims 64 and 128, seqlens 4k and 16k, full and causal; plain and softcap 30 forward
(hopper=True) and softcap forward+backward (the default backward). triton.testing.do_bench median.
CSV rows (no header): label,head_dim,causal,seqlen,feature,mode,ms."""
import sys

import torch
from triton.testing import do_bench

from kernels import flash_attention

label = sys.argv[1]
for head_dim in (64, 128):
    for seqlen in (4096, 16384):
        q, k, v, do = (torch.randn(16384 // seqlen, 2048 // head_dim, seqlen, head_dim, device="cuda",
                                   dtype=torch.float16, requires_grad=i < 3) for i in range(4))
        for causal in (False, True):
            for feature, softcap, mode in (("plain", 0.0, "fwd"), ("softcap30", 30.0, "fwd"),
                                           ("softcap30", 30.0, "fwd_bwd")):
                def step():
                    if mode == "fwd":
                        with torch.no_grad():
                            flash_attention(q, k, v, causal=causal, softcap=softcap, hopper=True)
                    else:
                        o = flash_attention(q, k, v, causal=causal, softcap=softcap, hopper=True)
                        torch.autograd.grad(o, (q, k, v), do)
                ms = do_bench(step, warmup=25, rep=100)
                print(f"{label},{head_dim},{int(causal)},{seqlen},{feature},{mode},{ms:.4f}", flush=True)
