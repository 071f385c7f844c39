"""Ratios from round 30's H100 probe (notes/round30/consumers_probe.py's rows):

    .venv/bin/python notes/round30/probe_summary.py [notes/round30/h100/consumers_probe_h100.csv]

Forward: the two-consumer time over the three-consumer time (>1: three is faster) and cuDNN's time over each
(>1: ours is faster), per head dim, mask and length, from the median of the two runs (each run's value also shown).
Dropout: forward+backward ms, the default (atomic dQ in 0006's tree) over deterministic=True (>1: atomic is slower),
and SDPA flash's time over ours deterministic."""
import sys

import pandas as pd

d = pd.read_csv(sys.argv[1] if len(sys.argv) > 1 else "notes/round30/h100/consumers_probe_h100.csv")
fwd = d[d.part == "fwd"]
runs = fwd.pivot_table(index=["head_dim", "causal", "seqlen"], columns=["label", "run"], values="ms")
med = fwd.groupby(["head_dim", "causal", "seqlen", "label"]).ms.median().unstack()
table = pd.DataFrame({
    "c2_over_c3": med.consumers2 / med.consumers3,
    "c2_over_c3_per_run": [f"{a / b:.3f}, {c / e:.3f}" for a, c, b, e in
                           zip(runs[("consumers2", 0)], runs[("consumers2", 1)], runs[("consumers3", 0)],
                               runs[("consumers3", 1)])],
    "cudnn_over_c2": med.cudnn / med.consumers2,
    "cudnn_over_c3": med.cudnn / med.consumers3,
})
print(table.round(3).to_string())
drop = d[d.part == "dropout_fwd_bwd"].groupby(["causal", "seqlen", "label"]).ms.median().unstack()
drop["atomic_over_deterministic"] = drop.dropout_default / drop.dropout_deterministic
drop["sdpa_over_deterministic"] = drop.sdpa_flash_dropout / drop.dropout_deterministic
drop["sdpa_over_atomic"] = drop.sdpa_flash_dropout / drop.dropout_default
print(drop.round(3).to_string())
