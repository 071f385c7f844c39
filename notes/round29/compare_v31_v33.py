"""Ratios of notes/round29/h100/alibi_fwd_probe_v31_v33_h100.csv (notes/round28/feature_fwd_probe.py's rows from v31's
and v33's trees, alternating, two runs each):

    .venv/bin/python notes/round29/compare_v31_v33.py

First table: v31's ms over v33's per run (above 1: v33 faster) and each tree's spread (max/min of its two runs).
Second: each feature's speed over plain (plain's ms over the feature's, medians of the two runs) in each tree."""
import pandas as pd

COLUMNS = ["label", "head_dim", "causal", "seqlen", "feature", "mode", "ms"]
CELL = ["mode", "feature", "head_dim", "causal", "seqlen"]

d = pd.read_csv("notes/round29/h100/alibi_fwd_probe_v31_v33_h100.csv", header=None, names=COLUMNS)
d["run"] = d.groupby(["label"] + CELL).cumcount()
runs = d.pivot_table(index=CELL, columns=["label", "run"], values="ms")
ratios = pd.DataFrame({
    "v31/v33 run 1": runs[("v31", 0)] / runs[("v33", 0)],
    "v31/v33 run 2": runs[("v31", 1)] / runs[("v33", 1)],
    "v31 spread": runs["v31"].max(axis=1) / runs["v31"].min(axis=1),
    "v33 spread": runs["v33"].max(axis=1) / runs["v33"].min(axis=1),
})
medians = d.groupby(["label"] + CELL[:1] + CELL[2:] + ["feature"]).ms.median().unstack("feature")
over_plain = pd.DataFrame({f"{f} / plain": medians["plain"] / medians[f]
                           for f in ("alibi", "softcap30", "softcap30_alibi")}).unstack("label")
pd.set_option("display.width", 200)
print(ratios.round(3).to_string())
print(over_plain.round(3).to_string())
