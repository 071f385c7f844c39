"""Ours against the SDPA flash and cuDNN backends on the paper's grid, from the archived speed run.

    python notes/peer_ratios.py [results/archive/nvidia-h200/speed.csv]

Prints, for fp16, forward and forward+backward: TFLOP/s of each, ours/flash, ours/cuDNN, and the
ratio of peak memory ours/flash; then the lowest ours/flash ratio at seqlen >= 1k and the highest
forward+backward memory ratio.
"""
import sys

import pandas as pd

path = sys.argv[1] if len(sys.argv) > 1 else "results/archive/nvidia-h200/speed.csv"
rows = pd.read_csv(path)
rows = rows[(rows.dtype == "fp16") & (rows.status == "ok") & rows["mode"].isin(["fwd", "fwd_bwd"])]
wide = rows.pivot_table(index=["head_dim", "causal", "mode", "seqlen_q"], columns="provider",
                        values=["tflops", "peak_mem_bytes"])
tflops, memory = wide["tflops"], wide["peak_mem_bytes"]
table = pd.DataFrame({
    "ours": tflops["ours"].round(0), "flash": tflops["sdpa_flash"].round(0), "cudnn": tflops["sdpa_cudnn"].round(0),
    "ours/flash": (tflops["ours"] / tflops["sdpa_flash"]).round(2),
    "ours/cudnn": (tflops["ours"] / tflops["sdpa_cudnn"]).round(2),
    "mem ours/flash": (memory["ours"] / memory["sdpa_flash"]).round(2),
}).reset_index()
print(table.to_string(index=False))
long = table[table.seqlen_q >= 1024]
print(f"lowest ours/flash at seqlen >= 1k: {long['ours/flash'].min()}; "
      f"highest fwd_bwd peak-memory ratio ours/flash: {table[table['mode'] == 'fwd_bwd']['mem ours/flash'].max()}")
