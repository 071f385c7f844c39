"""Decoding's GPU time as a fixed cost plus bytes over a streaming rate, for every provider, layout and batch.

The report's decode verdicts fit their worst cell's shape (analysis/decode.py's `fixed_cost`); this prints the
same fit for every (provider, variant, batch, heads, dtype) of a decode.csv, the published archive's by default.
    PYTHONPATH=. .venv/bin/python notes/round41/decode_fixed_cost.py [results/archive/nvidia-h200/decode.csv]
"""
import sys

import pandas as pd

from analysis.cells import eligible
from analysis.decode import _cells, copy_bandwidth, fixed_cost
from analysis.load import read_experiment

path = sys.argv[1] if len(sys.argv) > 1 else "results/archive/nvidia-h200/decode.csv"
frame = read_experiment(path)
copy_gbs = copy_bandwidth(frame)
print(f"copy bandwidth: {copy_gbs:.0f} GB/s")
fits = []
cells = eligible(_cells(frame))
for (provider, variant, batch, heads, kv_heads, dtype), shape in cells.groupby(
        ["provider", "variant", "batch", "heads", "kv_heads", "dtype"]):
    if (fit := fixed_cost(shape)) is not None:
        fits.append(dict(provider=provider, variant=variant, batch=int(batch), heads=f"{int(heads)}/{int(kv_heads)}",
                         dtype=dtype, caches=len(shape), fixed_us=fit[0], stream_share_of_copy=fit[1] / copy_gbs))
print(pd.DataFrame(fits).to_string(index=False, float_format=lambda v: f"{v:.3g}"))
