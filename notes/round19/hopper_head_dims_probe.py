"""The Hopper forward at head dims 96, 192 and 256 against the portable forward, SDPA flash and cuDNN; and the
portable backward's tiles at head dim 256.

    PYTHONPATH=. python3 notes/round19/hopper_head_dims_probe.py > $OUT/hopper_head_dims_probe_h200.csv   (sm_90)

v19 lets `flash_attention(..., hopper=True)` run kernels/_hopper.py at head dims 96, 192 (in the tiles of 128
and 256) and 256 (64-key tiles, two stages); the default (hopper=None) still runs the portable forward there.
This decides `HOPPER_FORWARD_MIN_KEYS` at those head dims, as the `hopper` ablation decided it at 64.

First a check per head dim and mask (ragged GQA shape, fp16 and bf16): the Hopper forward's output and lse
against the float64 reference, with the tests' rule (at most twice PyTorch's own error at the same
precision; tests/test_kernels.py) and no NaN; a line `# check ...` each, and nothing is timed at a head dim
that fails. Then triton.testing.do_bench medians (ms) on the `speed` ablation's shapes (batch x seqlen = 16k,
heads = 2048 // head dim whole heads: 21, 10, 8; fp16), full and causal, inputs that require grad as in
`speed`:
  fwd       `hopper` (hopper=True), `portable` (hopper=False), `sdpa_flash`, `sdpa_cudnn`
  fwd_bwd   the same forwards, each with the portable backward (hopper_backward=False), beside SDPA's
  bwd_tiles d256 forward+backward with the portable forward and backward tiles `BWD_TILES` (the default
            32 x 64 x 8 x 2 first and last, so drift over the cell shows); at sm_90 the dK/dV kernel of
            64 x 64 x 8 x 2 spills 296 bytes full, 996 causal, 64 x 32 x 8 x 2 none and 16
            (notes/round19/d256_bwd_sm90.txt)
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from experiments.flops import attention_flops  # noqa: E402
from kernels import TileConfig, attention_reference, flash_attention  # noqa: E402
from test_kernels import assert_close_to_reference, make_inputs  # noqa: E402

HEAD_DIMS = (96, 192, 256)
SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
BWD_TILES = [(32, 64, 8, 2), (64, 64, 8, 2), (64, 32, 8, 2), (32, 64, 8, 2)]
BWD_SEQLENS = (2048, 8192)


def check(head_dim: int) -> bool:
    ok = True
    for dtype in (torch.float16, torch.bfloat16):
        for causal in (False, True):
            q, k, v = (t.detach() for t in make_inputs(1, 4, 2, 701, 903, head_dim, dtype))
            try:
                out, lse = flash_attention(q, k, v, causal=causal, hopper=True, return_lse=True)
                ref_out, ref_lse = attention_reference(q, k, v, causal=causal, upcast=True)
                low_out, low_lse = attention_reference(q, k, v, causal=causal, upcast=False)
                assert not torch.isnan(out).any() and not torch.isnan(lse).any(), "NaN"
                assert_close_to_reference("out", out, low_out, ref_out)
                assert_close_to_reference("lse", lse, low_lse, ref_lse)
                print(f"# check d{head_dim} {dtype} causal={causal}: ok", flush=True)
            except Exception as error:  # say what failed, time nothing at this head dim
                print(f"# check d{head_dim} {dtype} causal={causal}: FAILED {type(error).__name__}: {error}"[:400],
                      flush=True)
                ok = False
    return ok


def timed(forward, grad_out, backward: bool):
    def call():
        out = forward()
        if backward:
            out.backward(grad_out)
    return call


def main():
    checked = [d for d in HEAD_DIMS if check(d)]
    print("mode,head_dim,causal,seqlen,arm,ms,tflops", flush=True)
    cells = [(mode, d, c, n) for mode in ("fwd", "fwd_bwd") for d in checked for c in (False, True) for n in SEQLENS]
    cells += [("bwd_tiles", 256, c, n) for c in (False, True) for n in BWD_SEQLENS if 256 in checked]
    for mode, head_dim, causal, seqlen in cells:
        backward = mode != "fwd"
        batch, heads = 16384 // seqlen, 2048 // head_dim
        q, k, v = (torch.randn(batch, heads, seqlen, head_dim, device="cuda", dtype=torch.float16, requires_grad=True)
                   for _ in range(3))
        grad_out = torch.randn_like(q)
        flops = attention_flops(batch, heads, seqlen, seqlen, head_dim, causal, "fwd_bwd" if backward else "fwd")

        def sdpa(backend):
            def call():
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            return call

        def ours(**kwargs):
            return lambda: flash_attention(q, k, v, causal=causal, hopper_backward=False, **kwargs)

        if mode == "bwd_tiles":
            arms = [("tiles_" + "x".join(map(str, t)), ours(hopper=False, bwd_tiles=TileConfig(*t))) for t in BWD_TILES]
        else:
            arms = [("portable", ours(hopper=False)), ("hopper", ours(hopper=True)),
                    ("sdpa_flash", sdpa(SDPBackend.FLASH_ATTENTION)), ("sdpa_cudnn", sdpa(SDPBackend.CUDNN_ATTENTION))]
        for arm, forward in arms:
            fn = timed(forward, grad_out, backward)
            try:
                fn()
                ms = do_bench(fn, warmup=20, rep=60, grad_to_none=[q, k, v] if backward else None)
            except Exception as error:  # a backend that declines the shape: say so and go on
                print(f"# {mode} d{head_dim} {arm}: {type(error).__name__}: {error}"[:300], flush=True)
                continue
            print(f"{mode},{head_dim},{int(causal)},{seqlen},{arm},{ms:.4f},{flops / ms / 1e9:.1f}", flush=True)
        del q, k, v, grad_out


if __name__ == "__main__":
    main()
