"""The engine's fp8 forward against its fp16 forward on the GPU (the issue's target: >= 1.5x at d128,
seqlen >= 4k). One CSV row per measurement.

    python3 notes/fp8_engine_bench.py notes/fp8_engine_bench_h200.csv     (a CUDA GPU; about a minute)
    TRITON_INTERPRET=1 python3 notes/fp8_engine_bench.py --tiny            (CPU: the code path, one tiny shape)

Shapes as notes/fp8_probe.py: head dim 64 and 128, full and causal, seqlen 4096 and 16384,
batch = 16384 // seqlen, heads = 2048 // head_dim, plus one ragged length (4000). Providers:
  ours_fp16     flash_attention on fp16 inputs (default tiles)
  ours_fp8      flash_attention on e4m3 inputs with per-(batch, head) descales, default tiles; the
                per-call transpose of V is inside the timed call
  ours_fp8_tiles=... the same with another tile config (d128: the probe's runner-up)
  v_transpose   kernels._forward.transposed_keys(v) alone
Columns: provider, head_dim, causal, seqlen, batch, heads, tiles, ms (do_bench median), tflops
(4 B H N^2 D / time, halved when causal), speedup_vs_fp16, rel_rms_err (fp8: vs the float64
attention of the dequantised inputs, batch 0, heads 0-1).
"""

from __future__ import annotations

import argparse
import csv
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kernels import TileConfig, attention_reference, flash_attention  # noqa: E402
from kernels._forward import transposed_keys  # noqa: E402

EXTRA_TILES = {128: [TileConfig(128, 64, 4, 3)], 64: [TileConfig(128, 128, 4, 3)]}


def quantise(x):
    descale = (x.abs().amax(dim=(2, 3)).float().clamp_min(1e-12) / 448.0).contiguous()
    return (x.float() / descale[:, :, None, None]).clamp(-448, 448).to(torch.float8_e4m3fn), descale


def bench(fn, device):
    if device == "cpu":
        fn()
        return float("nan")
    import triton.testing
    fn()
    return triton.testing.do_bench(fn, warmup=25, rep=150)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("csv", nargs="?", default="notes/fp8_engine_bench.csv")
    parser.add_argument("--tiny", action="store_true", help="one tiny shape (CPU interpreter)")
    args = parser.parse_args()
    device = "cpu" if args.tiny else "cuda"
    shapes = ([(64, c, 64) for c in (False, True)] if args.tiny else
              [(d, c, n) for d in (128, 64) for c in (False, True) for n in (4096, 16384, 4000)])
    with open(args.csv, "w", newline="") as f:
        writer = csv.DictWriter(f, ["provider", "head_dim", "causal", "seqlen", "batch", "heads", "tiles", "ms",
                                    "tflops", "speedup_vs_fp16", "rel_rms_err"])
        writer.writeheader()
        for head_dim, causal, n in shapes:
            batch, heads = (1, 2) if args.tiny else (max(1, 16384 // n), 2048 // head_dim)
            torch.manual_seed(0)
            q, k, v = (torch.randn(batch, heads, n, head_dim, device=device) for _ in range(3))
            (q8, qd), (k8, kd), (v8, vd) = quantise(q), quantise(k), quantise(v)
            q16, k16, v16 = q.half(), k.half(), v.half()
            del q, k, v
            flops = 4 * batch * heads * n * n * head_dim / (2 if causal else 1)
            shape = dict(head_dim=head_dim, causal=int(causal), seqlen=n, batch=batch, heads=heads)
            sub = (slice(0, 1), slice(0, 2))
            deq = [t[sub].double() * d[sub].double()[:, :, None, None] for t, d in ((q8, qd), (k8, kd), (v8, vd))]
            ref = attention_reference(*deq, causal=causal)[0]
            ms16 = bench(lambda: flash_attention(q16, k16, v16, causal=causal), device)
            writer.writerow(dict(provider="ours_fp16", **shape, ms=ms16, tflops=flops / ms16 / 1e9))
            for tiles in [None] + EXTRA_TILES.get(head_dim, []):
                def run(tiles=tiles):
                    return flash_attention(q8, k8, v8, causal=causal, q_descale=qd, k_descale=kd, v_descale=vd,
                                           fwd_tiles=tiles)
                out = run()
                err = ((out[sub].double() - ref).norm() / ref.norm()).item()
                ms = bench(run, device)
                name = "ours_fp8" if tiles is None else "ours_fp8_tiles"
                writer.writerow(dict(provider=name, **shape, ms=ms, tflops=flops / ms / 1e9,
                                     speedup_vs_fp16=ms16 / ms, rel_rms_err=err,
                                     tiles="" if tiles is None else (tiles.block_m, tiles.block_n, tiles.num_warps,
                                                                     tiles.num_stages)))
            ms_t = bench(lambda: transposed_keys(v8), device)
            writer.writerow(dict(provider="v_transpose", **shape, ms=ms_t))
            f.flush()
            print(f"d{head_dim} causal={causal} n={n} done", flush=True)


if __name__ == "__main__":
    main()
