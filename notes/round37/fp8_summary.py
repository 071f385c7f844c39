"""Summarise fp8_probe.csv files (notes/round37/fp8_probe.py), one per version of the fp8 Hopper forward: per head
dim, mask and sequence length, each run's median TFLOP/s of our fp16 forward, and the ratio of its fp8 Hopper
forward (flash_attention's fp8 default on sm_90) and of the portable fp8 forward (hopper=False) to it, medians
over the rounds, as one Markdown table. Labels name the runs.

    .venv/bin/python notes/round37/fp8_summary.py v39=notes/round37/h100_fp8/fp8_probe.csv \
        v40=notes/round37/h100_fp8_v40/fp8_probe.csv
"""
import sys

import pandas as pd

columns = []
for arg in sys.argv[1:]:
    label, path = arg.split("=", 1)
    d = pd.read_csv(path)
    t = d.groupby(["head_dim", "causal", "seqlen", "arm"]).tflops.median().unstack("arm")
    columns += [t["fp16_default"].round(0).astype(int).rename(f"{label}: fp16 TFLOP/s"),
                (t["fp8_hopper"] / t["fp16_default"]).round(2).rename(f"{label}: fp8 Hopper / fp16"),
                (t["fp8_portable"] / t["fp16_default"]).round(2).rename(f"{label}: fp8 portable / fp16")]
    print(f"{label}: {path}, {d.gpu.iloc[0]}, {d['round'].nunique()} rounds")
table = pd.concat(columns, axis=1).reset_index()
table["causal"] = table["causal"].map({0: "full", 1: "causal"})
print()
print(table.to_markdown(index=False))
