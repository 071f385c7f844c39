"""Softcap's forward+backward against the plain kernels, on the two backward kernels, for one tree's kernels.

    PYTHONPATH=. python3 notes/round25/softcap_probe.py > softcap_probe.csv      (an sm_90 GPU)

Run it for two trees in one device call to compare them. fp16, batch x seqlen = 16k tokens, 2048 // head dim
heads, head dims 64 and 128, seqlens 4k and 16k, full and causal, softcap 30; the Hopper forward in every arm
(hopper=True); the backward on the portable kernels (`portable_bwd`, hopper_backward=False) or the Hopper one
(`hopper_bwd`). Time of one forward+backward by triton.testing.do_bench (median). CSV:
head_dim,causal,seqlen,arm,feature,ms."""
import torch
from triton.testing import do_bench

from kernels import flash_attention

print("head_dim,causal,seqlen,arm,feature,ms")
for head_dim in (64, 128):
    for seqlen in (4096, 16384):
        q, k, v, do = (torch.randn(16384 // seqlen, 2048 // head_dim, seqlen, head_dim, device="cuda",
                                   dtype=torch.float16, requires_grad=i < 3) for i in range(4))
        for causal in (False, True):
            for arm, hopper_backward in (("portable_bwd", False), ("hopper_bwd", True)):
                for feature, softcap in (("plain", 0.0), ("softcap30", 30.0)):
                    def step():
                        o = flash_attention(q, k, v, causal=causal, softcap=softcap, hopper=True,
                                            hopper_backward=hopper_backward)
                        torch.autograd.grad(o, (q, k, v), do)
                    try:
                        ms = do_bench(step, warmup=25, rep=100)
                    except Exception as error:  # noqa: BLE001 (a probe: report and go on)
                        print(f"# {head_dim} {causal} {seqlen} {arm} {feature}: {type(error).__name__}: {error}")
                        continue
                    print(f"{head_dim},{int(causal)},{seqlen},{arm},{feature},{ms:.4f}", flush=True)
