"""Decoding with the splits merged in the forward kernel (v29) against the separate combine kernel, in one
process: the decode ablation's shapes (32 query heads over 4 KV heads, head dim 128, fp16, one new token,
every sequence full), dense and paged caches, each cell timed with experiments.measure's method (do_bench's
median and spread, host time, GPU time behind a sleep) for both merges, in alternating order, twice.

    PYTHONPATH=. python3 notes/round27/decode_merge_probe.py OUT.csv
"""
import csv
import itertools
import sys
from types import SimpleNamespace

import torch

import kernels._decode as decode
from experiments.decode import _inputs, layout_variant
from experiments.measure import _bench

TIMING = dict(warmup_ms=25, rep_ms=100)
FIELDS = ["batch", "seqlen_k", "layout", "merge", "rep", "num_splits", "ms", "ms_p20", "ms_p80", "gpu_ms", "host_ms",
          "max_abs_diff"]


def main(path):
    device = torch.device("cuda")
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        for batch, n, page in itertools.product((1, 8, 64), (1024, 8192, 32768, 131072), (None, 16)):
            if 2 * batch * 4 * n * 128 * 2 > 20e9:
                continue
            cell = SimpleNamespace(batch=batch, heads=32, kv_heads=4, seqlen_k=n, head_dim=128, dtype="fp16",
                                   variant=layout_variant(page))
            q, k, v, table = _inputs(cell, device)
            seqlens = torch.full((batch,), n, dtype=torch.int32, device=device)

            def call():
                return decode.decode_forward(q, k, v, seqlens, None, None, table, None, 128 ** -0.5, True, (-1, -1),
                                             0.0, 0, n)

            outputs = {}
            for merge in (True, False):
                decode.merge_in_place = merge
                outputs[merge] = call()
            diff = (outputs[True][0].float() - outputs[False][0].float()).abs().max().item()
            splits = outputs[True][2]
            del outputs
            for rep in range(2):
                for merge in ((True, False) if rep == 0 else (False, True)):
                    decode.merge_in_place = merge
                    r = _bench(lambda: call()[0], TIMING)
                    writer.writerow(dict(batch=batch, seqlen_k=n, layout=cell.variant, merge=int(merge), rep=rep,
                                         num_splits=splits, ms=r["ms"], ms_p20=r["ms_p20"], ms_p80=r["ms_p80"],
                                         gpu_ms=r["gpu_ms"], host_ms=r["host_ms"], max_abs_diff=diff))
                    f.flush()
            print(f"B{batch} N{n} {cell.variant}: splits {splits}, diff {diff:.2e}", flush=True)
            del q, k, v, table
            torch.cuda.empty_cache()
    decode.merge_in_place = True


if __name__ == "__main__":
    main(sys.argv[1])
