"""Decoding's GPU time as a fixed cost plus bytes over a streaming bandwidth, fitted per provider, layout and batch.

Reads a decode.csv (the published archive's by default), takes the GQA cells in fp16 and bf16, and fits, for each
(provider, variant, batch), gpu_us = fixed + MB / bandwidth by least squares over the cache lengths. It then prints,
for batch 1 at 8k keys, the fixed cost a call may have at the fitted bandwidth to reach a share of the copy bandwidth.
    .venv/bin/python notes/round41/decode_fixed_cost.py [results/archive/nvidia-h200/decode.csv]
"""
import sys

import numpy as np
import pandas as pd

path = sys.argv[1] if len(sys.argv) > 1 else "results/archive/nvidia-h200/decode.csv"
rows = pd.read_csv(path)
copy = rows[rows.provider == "torch_copy"]
copy_gbs = (copy.input_bytes / copy.gpu_ms / 1e6).median()  # bytes / ms / 1e6 = GB/s
print(f"copy bandwidth (gpu_ms of the copy rows, median): {copy_gbs:.0f} GB/s")
cells = rows[(rows.kv_heads < rows.heads) & rows.dtype.isin(["fp16", "bf16"]) & rows.provider.isin(["ours", "sdpa"])]
cells = cells.groupby(["provider", "variant", "batch", "seqlen_k", "dtype"]).agg(
    gpu_us=("gpu_ms", lambda x: 1000 * x.median()), mb=("input_bytes", lambda x: x.median() / 1e6)).reset_index()
fits = []
for (provider, variant, batch), cell in cells.groupby(["provider", "variant", "batch"]):
    design = np.vstack([np.ones(len(cell)), cell.mb]).T
    (fixed, us_per_mb), *_ = np.linalg.lstsq(design, cell.gpu_us, rcond=None)
    fits.append(dict(provider=provider, variant=variant, batch=int(batch), cells=len(cell), fixed_us=fixed,
                     stream_gbs=1e3 / us_per_mb, stream_share_of_copy=1e3 / us_per_mb / copy_gbs))
fits = pd.DataFrame(fits)
print(fits.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
b1 = cells[(cells.batch == 1) & (cells.seqlen_k == 8192)]
print("\nbatch 1, 8k keys:")
print(b1.assign(share_of_copy=b1.mb * 1e3 / b1.gpu_us / copy_gbs).to_string(index=False, float_format=lambda v: f"{v:.3g}"))
ours = fits[(fits.provider == "ours") & (fits.variant == "dense") & (fits.batch == 1)].iloc[0]
mb = b1.mb.iloc[0]
for share in (0.5, 0.7):
    budget = mb * 1e3 / (share * copy_gbs)
    print(f"{share:.0%} of the copy bandwidth at {mb:.1f} MB: {budget:.2f} us a call; at ours' streaming rate the "
          f"reads take {mb * 1e3 / ours.stream_gbs:.2f} us, leaving {budget - mb * 1e3 / ours.stream_gbs:.2f} us of fixed cost")
