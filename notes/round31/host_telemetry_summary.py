"""Summary of notes/round31/host_telemetry_probe.py's rows: per method, provider, mode and telemetry arm, the
median host time (us) over cells and samples, its p10-p90, and ours over SDPA flash per cell (medians).

    .venv/bin/python notes/round31/host_telemetry_summary.py notes/round31/h200/host_telemetry_probe_h200.csv
"""
import sys

import pandas as pd

d = pd.read_csv(sys.argv[1])
q = d.groupby(["method", "mode", "provider", "arm"]).host_us
print(pd.DataFrame({"median": q.median(), "p10": q.quantile(0.1), "p90": q.quantile(0.9),
                    "n": q.size()}).round(1).to_string())
cell = ["method", "arm", "mode", "head_dim", "causal"]
m = d.groupby(cell + ["provider"]).host_us.median().unstack("provider")
m["ours_over_sdpa"] = m["ours"] / m["sdpa_flash"]
print()
print(m.round(2).to_string())
print()
print("ours over SDPA flash, median over cells:")
print(m.groupby(["method", "arm", "mode"]).ours_over_sdpa.median().round(2).to_string())
# how far one pipeline host_ms (a median of 5 calls) strays: each sample over its cell's median
p = d[d.method == "pipeline"].copy()
p["over_cell_median"] = p.host_us / p.groupby(cell + ["provider"]).host_us.transform("median")
print()
print("pipeline host_ms over its cell's median (p10, p50, p90, max), by arm:")
print(p.groupby(["arm", "provider"]).over_cell_median.quantile([0.1, 0.5, 0.9, 1.0]).unstack().round(2).to_string())
