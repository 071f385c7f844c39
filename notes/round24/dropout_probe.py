"""Dropout's speed on the GPU at the `features` ablation's shapes, against SDPA's FlashAttention-2 and our plain kernels.

One process, fp16, head dim 128, batch x seqlen = 16k, 16 heads; seqlens 4k and 16k, full and causal; p = 0.1.
Arms (time of one call, forward or forward+backward, by triton.testing.do_bench, median of its calls):
  ours_dropout           flash_attention(dropout_p=0.1), the engine's defaults (portable kernels)
  ours_dropout_tile128   the same with the forward in 128 x 128 tiles (fwd_tiles), the plain forward's
  ours_dropout_atomic_dq the same with atomic_dq=True (the one-kernel portable backward)
  ours_portable          ours without dropout on the portable kernels (hopper=False, hopper_backward=False)
  sdpa_flash_dropout     SDPA's flash backend with dropout_p=0.1
Prints CSV: mode,causal,seqlen,arm,ms. Run it on two trees in one device call to compare them.

    PYTHONPATH=. python3 notes/round24/dropout_probe.py > dropout_probe.csv
"""
import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

from kernels import TileConfig, flash_attention

P = 0.1


def arms(causal):
    def ours(**kw):
        return lambda q, k, v: flash_attention(q, k, v, causal=causal, **kw)

    def sdpa(q, k, v):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, dropout_p=P, is_causal=causal)

    return {"ours_dropout": ours(dropout_p=P),
            "ours_dropout_tile128": ours(dropout_p=P, fwd_tiles=TileConfig(128, 128, 8, 3)),
            "ours_dropout_atomic_dq": ours(dropout_p=P, atomic_dq=True),
            "ours_portable": ours(hopper=False, hopper_backward=False),
            "sdpa_flash_dropout": sdpa}


def main():
    print("mode,causal,seqlen,arm,ms")
    for seqlen in (4096, 16384):
        batch = 16384 // seqlen
        q, k, v = (torch.randn(batch, 16, seqlen, 128, device="cuda", dtype=torch.float16, requires_grad=True)
                   for _ in range(3))
        d_out = torch.randn_like(q)
        for causal in (False, True):
            for name, fn in arms(causal).items():
                def forward():
                    with torch.no_grad():
                        fn(q, k, v)

                def forward_backward():
                    torch.autograd.grad(fn(q, k, v), (q, k, v), d_out)

                for mode, call in (("fwd", forward), ("fwd_bwd", forward_backward)):
                    if mode == "fwd" and name == "ours_dropout_atomic_dq":
                        continue
                    try:
                        ms = triton.testing.do_bench(call, warmup=25, rep=200)
                    except Exception as error:  # a config that does not fit: say so, go on
                        print(f"# {mode} {causal} {seqlen} {name}: {type(error).__name__}: {error}", flush=True)
                        continue
                    print(f"{mode},{int(causal)},{seqlen},{name},{ms:.4f}", flush=True)


if __name__ == "__main__":
    main()
