"""A candidate split rule for decoding, timed on the GPU before it goes into the kernels.

    python3 notes/decode_split_rule_probe.py OUT.csv [--passes 2]

Candidate: the smallest power of two giving at least two waves of programs over the SMs, capped by
the largest power of two within today's caps (keys per split >= MIN_KEYS_PER_SPLIT, one key tile
per split at least, MAX_SPLITS). It is passed as an explicit num_splits to main's kernels beside
the automatic choice (kernels._decode.choose_num_splits) and the fastest SDPA backend, over the
decode ablation's grid (experiments/config.yaml: batches, cache lengths, GQA 8:1 and MHA, fp16 and
bf16, dense and paged 256 / 16). Rows: median, 20th and 80th percentile ms (triton.testing.do_bench).
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
from kernels._decode import (MAX_SPLITS, MIN_KEYS_PER_SPLIT, decode_block_sizes, decode_forward,  # noqa: E402
                             sm_count)


def power_of_two_splits(batch, kv_heads, m_blocks, max_keys, device, block_n):
    programs = max(batch * kv_heads * m_blocks, 1)
    want = triton.next_power_of_2(triton.cdiv(2 * sm_count(device), programs))
    cap = max(1, min(max_keys // MIN_KEYS_PER_SPLIT, triton.cdiv(max(max_keys, 1), block_n), MAX_SPLITS))
    cap = 1 << (cap.bit_length() - 1)
    return min(want, cap)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--passes", type=int, default=2)
    args = parser.parse_args()
    device = torch.device("cuda")
    fields = ["pass", "dtype", "batch", "heads", "kv_heads", "seqlen_k", "layout", "fn", "num_splits", "ms",
              "ms_p20", "ms_p80"]
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for p in range(args.passes):
            for dtype in ["fp16", "bf16"]:
                for heads, kv_heads in [(32, 4), (32, 32)]:
                    for batch in [1, 8, 64]:
                        for n in [1024, 8192, 32768, 131072]:
                            if cache_bytes(batch, kv_heads, n, 128, dtype) > 60e9:
                                continue
                            for page in [None, 256, 16]:
                                cell = types.SimpleNamespace(batch=batch, heads=heads, kv_heads=kv_heads, seqlen_k=n,
                                                             head_dim=128, dtype=dtype, variant=layout_variant(page))
                                q, k, v, table = _inputs(cell, device)
                                seqlens = torch.full((batch,), n, dtype=torch.int32, device=device)
                                block_m, block_n = decode_block_sizes(128, heads // kv_heads, device)[:2]
                                m_blocks = triton.cdiv(heads // kv_heads, block_m)
                                rule = power_of_two_splits(batch, kv_heads, m_blocks, n, device, block_n)

                                def ours(s):
                                    return lambda: decode_forward(q, k, v, seqlens, None, None, table, None,
                                                                  128 ** -0.5, True, (-1, -1), 0.0, s, n)
                                fns = [("ours_auto", ours(0)()[2], ours(0)), ("ours_pow2", rule, ours(rule))]
                                if page is None:
                                    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
                                    sdpa, note = _best_sdpa(qt, kt, vt, heads != kv_heads)
                                    fns.append((note, 0, sdpa))
                                for name, splits, fn in fns:
                                    ms, p20, p80 = triton.testing.do_bench(fn, warmup=10, rep=60,
                                                                           quantiles=[0.5, 0.2, 0.8])
                                    writer.writerow(dict(zip(fields, [p, dtype, batch, heads, kv_heads, n, cell.variant,
                                                                      name, splits, ms, p20, p80])))
                                    f.flush()
                                print(p, dtype, batch, heads, kv_heads, n, cell.variant, flush=True)
                                del q, k, v, table, fns
                                if page is None:
                                    del qt, kt, vt, sdpa
                                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
