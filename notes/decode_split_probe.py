"""Decoding's split count on the GPU: our split-KV forward at fixed split counts against the
automatic choice (kernels._decode.choose_num_splits) and the fastest SDPA backend, same process.

    python3 notes/decode_split_probe.py OUT.csv [--passes 2]

Shapes: the decode ablation's (seqlen_q 1, head dim 128, causal, fp16), caches of 8k keys or more,
GQA 8:1 and MHA, dense and paged (page 16, pages shuffled). Each row: one function's median, 20th
and 80th percentile ms (triton.testing.do_bench), the split count, and K+V bytes read / median
time. A copy of 1 GiB per pass gives the bandwidth roof (bytes read + written / time).
"""
import argparse
import csv
import sys
import types
from pathlib import Path

import torch
import triton
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.decode import _best_sdpa, _inputs, cache_bytes, layout_variant  # noqa: E402
from kernels._decode import choose_num_splits, decode_forward  # noqa: E402

SPLITS = [0, 4, 8, 12, 16, 24, 32, 48, 64]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--passes", type=int, default=2)
    args = parser.parse_args()
    device = torch.device("cuda")
    rows = []
    fields = ["pass", "batch", "heads", "kv_heads", "seqlen_k", "layout", "fn", "num_splits", "ms", "ms_p20",
              "ms_p80", "kv_gb_per_s", "copy_gb_per_s", "sm_clock_mhz"]
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for p in range(args.passes):
            src = torch.empty(1 << 29, dtype=torch.float16, device=device)
            dst = torch.empty_like(src)
            copy_ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=25, rep=200)
            copy_gbs = 2 * src.numel() * 2 / copy_ms / 1e6
            del src, dst
            for heads, kv_heads in [(32, 4), (32, 32)]:
                for batch in [1, 8, 64]:
                    for n in [8192, 32768, 131072]:
                        if cache_bytes(batch, kv_heads, n, 128, "fp16") > 60e9:
                            continue
                        for page in [None, 16]:
                            cell = types.SimpleNamespace(batch=batch, heads=heads, kv_heads=kv_heads, seqlen_k=n,
                                                         head_dim=128, dtype="fp16", variant=layout_variant(page))
                            q, k, v, table = _inputs(cell, device)
                            seqlens = torch.full((batch,), n, dtype=torch.int32, device=device)
                            kv_bytes = 2 * batch * n * kv_heads * 128 * 2
                            fns = []
                            for s in SPLITS:
                                def fn(s=s):
                                    return decode_forward(q, k, v, seqlens, None, None, table, None, 128 ** -0.5,
                                                          True, (-1, -1), 0.0, s, n)
                                chosen = fn()[2] if s == 0 else s
                                fns.append(("ours_auto" if s == 0 else "ours", chosen, fn))
                            if page is None:
                                qt, kt, vt = q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
                                sdpa, note = _best_sdpa(qt, kt, vt, heads != kv_heads)
                                fns.append((note, 0, sdpa))
                            for name, splits, fn in fns:
                                ms, p20, p80 = triton.testing.do_bench(fn, warmup=10, rep=60, quantiles=[0.5, 0.2, 0.8])
                                clock = torch.cuda.clock_rate() if hasattr(torch.cuda, "clock_rate") else ""
                                row = dict(zip(fields, [p, batch, heads, kv_heads, n, cell.variant, name, splits, ms,
                                                        p20, p80, kv_bytes / ms / 1e6, copy_gbs, clock]))
                                writer.writerow(row)
                                f.flush()
                                print(p, batch, heads, kv_heads, n, cell.variant, name, splits, f"{ms:.4f}", flush=True)
                            del q, k, v, table
                            if page is None:
                                del qt, kt, vt
                            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
