"""The portable forward at head dims 96 and 192: two column chunks against the pad, beside SDPA flash.

    PYTHONPATH=. python3 notes/head_dim_chunks_probe.py > notes/<dir>/head_dim_chunks_probe_h200.csv   (a CUDA GPU)

`kernels.tiles.head_dim_chunks` computes 96 as 64 + 32 and 192 as 128 + 64 columns where the kernels padded
them to 128 and 256 (`CHUNKED_HEAD_DIMS = False`). This times the forward (triton.testing.do_bench median,
ms) on the `speed` ablation's shapes (batch x seqlen = 16k, hidden 2048: 21 heads at 96, 10 at 192; fp16),
full and causal, for: SDPA's FlashAttention-2 (`sdpa_flash`), ours padded (`padded`), ours in chunks with
the default tiles (`chunks`) and with one more tile config per head dim (`chunks_<tiles>`: 128 x 64 with 8
warps at 96, 128 x 32 with 8 warps at 192, both free of spills at sm_90 in tests/sm90_compile.py).
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

import kernels.tiles as tiles
from experiments.flops import attention_flops
from kernels import TileConfig, flash_attention

EXTRA = {96: (128, 64, 8, 2), 192: (128, 32, 8, 2)}


def main():
    print("head_dim,causal,seqlen,arm,ms,tflops", flush=True)
    for head_dim in (96, 192):
        heads = 2048 // head_dim
        for causal in (False, True):
            for seqlen in (1024, 4096, 16384):
                batch = 16384 // seqlen
                q, k, v = (torch.randn(batch, heads, seqlen, head_dim, device="cuda", dtype=torch.float16)
                           for _ in range(3))
                flops = attention_flops(batch, heads, seqlen, seqlen, head_dim, causal, "fwd")

                def sdpa():
                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                def ours(chunked, fwd_tiles=None):
                    def call():
                        tiles.CHUNKED_HEAD_DIMS = chunked
                        return flash_attention(q, k, v, causal=causal, fwd_tiles=fwd_tiles)
                    return call

                extra = TileConfig(*EXTRA[head_dim])
                arms = [("sdpa_flash", sdpa), ("padded", ours(False)), ("chunks", ours(True)),
                        ("chunks_" + "x".join(map(str, EXTRA[head_dim])), ours(True, extra)), ("padded", ours(False))]
                for arm, fn in arms:
                    fn()
                    ms = do_bench(fn, warmup=25, rep=100)
                    print(f"{head_dim},{int(causal)},{seqlen},{arm},{ms:.4f},{flops / ms / 1e9:.1f}", flush=True)
    tiles.CHUNKED_HEAD_DIMS = True


if __name__ == "__main__":
    main()
