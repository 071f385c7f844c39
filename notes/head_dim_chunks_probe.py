"""The portable kernels at head dims 96 and 192: two column chunks against the pad, beside SDPA flash.

    PYTHONPATH=. python3 notes/head_dim_chunks_probe.py > notes/<dir>/head_dim_chunks_probe_h200.csv   (a CUDA GPU)

`kernels.tiles.head_dim_chunks` computes 96 as 64 + 32 and 192 as 128 + 64 columns where the kernels padded
them to 128 and 256 (`CHUNKED_HEAD_DIMS = False`). This times (triton.testing.do_bench median, ms) the
forward (`fwd`) and the forward+backward (`fwd_bwd`, the portable backward: hopper_backward=False) on the
`speed` ablation's shapes (batch x seqlen = 16k, hidden 2048: 21 heads at 96, 10 at 192; fp16), full and
causal, for: SDPA's FlashAttention-2 (`sdpa_flash`), ours padded (`padded`), ours in chunks with the default
tiles (`chunks`) and with other tile configs (`chunks_<tiles>`: the forward's in `FWD_EXTRA`, the backward's
in `BWD_EXTRA`; at sm_90 the backward's 64 x 64 at d192 spills 68-272 bytes in dK/dV, the others
none or under 20 (notes/round18/head_dim_chunks_bwd_sm90.txt)). `padded` runs first and
last in each cell, so drift over the cell shows.
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

import kernels.tiles as tiles
from experiments.flops import attention_flops
from kernels import TileConfig, flash_attention

FWD_EXTRA = {96: [(128, 64, 8, 2)], 192: [(128, 32, 8, 2)]}
BWD_EXTRA = {96: [(64, 128, 8, 2), (64, 64, 8, 2)], 192: [(32, 64, 8, 3), (64, 64, 8, 2)]}
SEQLENS = {"fwd": (1024, 4096, 16384), "fwd_bwd": (2048, 8192)}


def main():
    print("mode,head_dim,causal,seqlen,arm,ms,tflops", flush=True)
    for mode in ("fwd", "fwd_bwd"):
        backward = mode == "fwd_bwd"
        for head_dim in (96, 192):
            heads = 2048 // head_dim
            for causal in (False, True):
                for seqlen in SEQLENS[mode]:
                    batch = 16384 // seqlen
                    q, k, v = (torch.randn(batch, heads, seqlen, head_dim, device="cuda", dtype=torch.float16,
                                           requires_grad=backward) for _ in range(3))
                    grad_out = torch.randn_like(q)
                    flops = attention_flops(batch, heads, seqlen, seqlen, head_dim, causal, mode)

                    def timed(forward):
                        def call():
                            out = forward()
                            if backward:
                                out.backward(grad_out)
                        return call

                    def sdpa():
                        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                    def ours(chunked, **kwargs):
                        def call():
                            tiles.CHUNKED_HEAD_DIMS = chunked
                            return flash_attention(q, k, v, causal=causal, hopper_backward=False, **kwargs)
                        return call

                    key = "bwd_tiles" if backward else "fwd_tiles"
                    extra = (BWD_EXTRA if backward else FWD_EXTRA)[head_dim]
                    arms = [("padded", ours(False)), ("sdpa_flash", sdpa), ("chunks", ours(True))]
                    arms += [("chunks_" + "x".join(map(str, c)), ours(True, **{key: TileConfig(*c)})) for c in extra]
                    arms += [("padded", ours(False))]
                    for arm, forward in arms:
                        fn = timed(forward)
                        try:
                            fn()
                            ms = do_bench(fn, warmup=25, rep=100, grad_to_none=[q, k, v] if backward else None)
                        except Exception as error:  # a config that does not fit: say so and go on
                            print(f"# {mode} d{head_dim} {arm}: {type(error).__name__}: {error}"[:300], flush=True)
                            continue
                        print(f"{mode},{head_dim},{int(causal)},{seqlen},{arm},{ms:.4f},{flops / ms / 1e9:.1f}",
                              flush=True)
                    del q, k, v, grad_out
    tiles.CHUNKED_HEAD_DIMS = True


if __name__ == "__main__":
    main()
