"""Ours against the SDPA flash and cuDNN backends on the paper's grid, from the archived speed run.

    python notes/peer_ratios.py [results/archive/nvidia-h200/speed.csv] [modes, default fwd,fwd_bwd]

Prints, for fp16, forward and forward+backward: TFLOP/s of each (median over repetitions),
ours/flash, ours/cuDNN, the ratio of attention's own memory ours/flash, and `hb` where a repetition of
ours was host-bound; then the lowest ours/flash ratio at seqlen >= 1k and the highest
forward+backward memory ratio. Archives of the older schema (one repetition, no host_bound or
attn_mem_bytes column) are read too.
"""
import sys

import pandas as pd

path = sys.argv[1] if len(sys.argv) > 1 else "results/archive/nvidia-h200/speed.csv"
modes = sys.argv[2].split(",") if len(sys.argv) > 2 else ["fwd", "fwd_bwd"]
rows = pd.read_csv(path)
rows = rows[(rows.dtype == "fp16") & (rows.status == "ok") & rows["mode"].isin(modes)]
memory_column = "attn_mem_bytes" if "attn_mem_bytes" in rows else "peak_mem_bytes"
if "host_bound" not in rows:
    rows = rows.assign(host_bound=0)
wide = rows.pivot_table(index=["head_dim", "causal", "mode", "seqlen_q"], columns="provider",
                        values=["tflops", memory_column, "host_bound"], aggfunc={"tflops": "median",
                        memory_column: "median", "host_bound": "max"})
tflops, memory = wide["tflops"], wide[memory_column]
table = pd.DataFrame({
    "ours": tflops["ours"].round(0), "flash": tflops["sdpa_flash"].round(0), "cudnn": tflops["sdpa_cudnn"].round(0),
    "ours/flash": (tflops["ours"] / tflops["sdpa_flash"]).round(2),
    "ours/cudnn": (tflops["ours"] / tflops["sdpa_cudnn"]).round(2),
    "mem ours/flash": (memory["ours"] / memory["sdpa_flash"]).round(2),
    "hb": wide["host_bound"]["ours"].map({0: "", 1: "hb"}),
}).reset_index()
print(table.to_string(index=False))
long = table[table.seqlen_q >= 1024]
print(f"lowest ours/flash at seqlen >= 1k: {long['ours/flash'].min()}; "
      f"highest fwd_bwd peak-memory ratio ours/flash: {table[table['mode'] == 'fwd_bwd']['mem ours/flash'].max()}")
