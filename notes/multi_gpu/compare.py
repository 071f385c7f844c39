"""Two ablations on a 2-GPU H200 host: concurrently (--cores 2 --resources gpu=2) against one
after the other (--cores 1 --resources gpu=1), same machine, same commit.

    python notes/multi_gpu/compare.py
"""
from pathlib import Path

import pandas as pd

HERE = Path(__file__).parent
KEYS = ["provider", "variant", "mode", "dtype", "head_dim", "causal", "seqlen_q"]

for run in ("concurrent", "sequential"):
    log = (HERE / run / "snakemake.log").read_text()
    elapsed = next(line for line in log.splitlines() if line.startswith("Elapsed time"))
    devices = [line.strip() for name in ("causal", "recompute")
               for line in (HERE / run / f"{name}.log").read_text().splitlines() if "CUDA device" in line]
    spans = []
    for name in ("causal", "recompute"):
        stamps = pd.to_datetime(pd.read_csv(HERE / run / f"{name}.csv").timestamp)
        spans.append(f"{name} rows {stamps.min().time()}-{stamps.max().time()}")
    print(f"{run:10s} {elapsed}; {'; '.join(devices)}; {'; '.join(spans)}")

for name in ("causal", "recompute"):
    a = pd.read_csv(HERE / "concurrent" / f"{name}.csv")
    b = pd.read_csv(HERE / "sequential" / f"{name}.csv")
    pairs = a.merge(b, on=KEYS, suffixes=("_c", "_s"))
    pairs = pairs[(pairs.status_c == "ok") & (pairs.status_s == "ok")]
    ratio = pairs.ms_c / pairs.ms_s
    print(f"{name}: time concurrent/sequential median {ratio.median():.3f} [{ratio.min():.3f}, {ratio.max():.3f}] "
          f"over {len(pairs)} cells")
