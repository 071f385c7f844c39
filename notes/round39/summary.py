"""The table of notes/round39/fp8_probe.py's output: per cell the median over rounds of each arm's time, and the
ratios that decide v44 and v45 (above 1.00x is faster), fp8 over our fp16 forward, and V^T's copy per tile.

    python3 notes/round39/summary.py OUT.csv
"""
import sys

import pandas as pd

rows = pd.read_csv(sys.argv[1])
ms = rows.groupby(["head_dim", "causal", "seqlen", "arm"]).ms.median().unstack("arm")
table = pd.DataFrame({
    "fp16 ms": ms["fp16_default"],
    "v44/v43 fp8": ms["fp8_v43"] / ms["fp8_v44"],
    "v45/v44 fp8": ms["fp8_v44"] / ms["fp8_v45"],
    "v45/v44 fp16": ms["fp16_v44"] / ms["fp16_v45"],
    "pingpong/v45 fp16": ms["fp16_v45"] / ms["fp16_v45_pingpong"],
    "pingpong/v45 fp8": ms["fp8_v45"] / ms["fp8_v45_pingpong"],
    "fp8 v43/fp16": ms["fp16_default"] / ms["fp8_v43"],
    "fp8 v45/fp16": ms["fp16_default"] / ms["fp8_v45"],
    "portable/fp16": ms["fp16_default"] / ms["fp8_portable"],
    **{f"copy {c[7:] or 'default'} ms": ms[c] for c in ms.columns if c.startswith("v_copy")},
})
print(table.round(3).to_string())
print("v44 equal to v43 bit for bit in every cell:", bool((rows[rows.arm == "fp8_v44"].equal_v43 == 1).all()))
copies = rows[rows.arm.str.startswith("v_copy_") & (rows.arm != "v_copy_key_order")]
print("other copy tiles equal to the default's in every cell:", bool((copies.equal_v43 == 1).all()))
