"""Run-to-run check: the same speed grid measured twice on the H200, ours and the peers.

    python notes/compare_runs.py notes/v1_first_pass_speed.csv results/archive/nvidia-h200/speed.csv
"""
import sys

import pandas as pd

first, second = (pd.read_csv(path) for path in sys.argv[1:3])
keys = ["provider", "mode", "dtype", "head_dim", "causal", "seqlen_q"]
pairs = first.merge(second, on=keys, suffixes=("_1", "_2"))
pairs = pairs[(pairs.status_1 == "ok") & (pairs.status_2 == "ok")]
pairs["ratio"] = pairs.ms_2 / pairs.ms_1
for provider, rows in pairs.groupby("provider"):
    long = rows[rows.seqlen_q >= 4096]
    print(f"{provider:15s} time ratio second/first: all lengths median {rows.ratio.median():.3f} "
          f"[{rows.ratio.min():.3f}, {rows.ratio.max():.3f}]; seqlen >= 4k median {long.ratio.median():.3f} "
          f"[{long.ratio.min():.3f}, {long.ratio.max():.3f}]")
