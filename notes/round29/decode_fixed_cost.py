"""GPU time of the archive's GQA 8:1 decode cells (caches of 8k keys or more) beyond their bytes at the copy
bandwidth measured in the same run, in microseconds, per provider, layout and batch:

    .venv/bin/python notes/round29/decode_fixed_cost.py [results/archive/nvidia-h200/decode.csv]

gpu_ms is the cell's median over repetitions; bytes are those the bandwidth column counts (the note's bytes=)."""
import sys

import pandas as pd

d = pd.read_csv(sys.argv[1] if len(sys.argv) > 1 else "results/archive/nvidia-h200/decode.csv")
copy = d[d.provider == "torch_copy"]
bandwidth = (copy.input_bytes / (copy.gpu_ms * 1e-3)).median()
cells = d[d.provider.isin(["ours", "sdpa"]) & (d.heads == 32) & (d.kv_heads == 4) & (d.seqlen_k >= 8192)]
cells = cells.assign(bytes=cells.note.str.extract(r"bytes=(\d+)")[0].astype(float))
g = cells.groupby(["provider", "variant", "dtype", "batch", "seqlen_k"]).agg(gpu_ms=("gpu_ms", "median"),
                                                                             bytes=("bytes", "median"))
g["beyond_copy_us"] = (g.gpu_ms - g.bytes / bandwidth * 1e3) * 1e3
print(f"copy bandwidth {bandwidth / 1e9:.0f} GB/s")
print(g.beyond_copy_us.groupby(level=["provider", "variant", "batch"]).agg(["min", "max"]).round(1).to_string())
