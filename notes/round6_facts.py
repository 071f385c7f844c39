"""The numbers quoted in notes/perf.md's "v6" section, read from pipeline-written files.

    python3 notes/round6_facts.py [RUN_DIR] [ARCHIVE_DIR] [COMPARE_CSV]

RUN_DIR defaults to results/archive/nvidia-h200 (the round-6 H200 run at cc07b7d, archived),
ARCHIVE_DIR to the archive it replaced (run 919b2d3), read from git at the last commit that held it,
COMPARE_CSV to notes/compare_round6/compare.csv (`snakemake --cores 1 compare --config
compare='{baseline: OLD_ARCHIVE, candidate: results/archive/nvidia-h200}'`, copied there).

1. compare: the improvements by ablation, provider, mode and head dim (ratio = new / old ms).
2. speed: ours' fp16 TFLOP/s at head dim 256 per length and mode, old and new.
3. host time per call at seqlen 512 (host_ms, median over repetitions), ours and SDPA flash, old and
   new, and ours over SDPA flash.
4. fp8: ours_fp8 over ours (fp16) per head dim, mask and length (median ms over repetitions), the
   cells marked host-bound, and the accuracy rows.
5. features: the dropout arms against SDPA flash (forward+backward, median ms).
6. jit: first-call seconds per head dim and mask, empty and filled cache.
"""
import os
import subprocess
import sys
import tempfile

import pandas as pd

# The last commit whose results/archive/nvidia-h200 is the run of 919b2d3.
PREVIOUS_ARCHIVE_COMMIT = "ac5d5cf67137"


def previous_archive():
    """Extract results/archive/nvidia-h200 as of PREVIOUS_ARCHIVE_COMMIT into a temporary folder."""
    folder = tempfile.mkdtemp(prefix="archive-919b2d3-")
    tar = subprocess.run(["git", "archive", PREVIOUS_ARCHIVE_COMMIT, "results/archive/nvidia-h200"],
                         check=True, capture_output=True).stdout
    subprocess.run(["tar", "x", "-C", folder], input=tar, check=True)
    return os.path.join(folder, "results/archive/nvidia-h200")


run = sys.argv[1] if len(sys.argv) > 1 else "results/archive/nvidia-h200"
archive = sys.argv[2] if len(sys.argv) > 2 else previous_archive()
compare_csv = sys.argv[3] if len(sys.argv) > 3 else "notes/compare_round6/compare.csv"
pd.set_option("display.width", 220)
pd.set_option("display.max_rows", 500)
pd.set_option("display.max_columns", 30)
KEYS = ["provider", "variant", "mode", "head_dim", "causal", "batch", "seqlen_q"]


def rows(path, name):
    frame = pd.read_csv(f"{path}/{name}.csv")
    return frame[frame.status == "ok"]


def medians(frame, value="ms"):
    return frame.groupby(KEYS, dropna=False)[value].median()


print("1. compare: improvements (ratio = new / old median ms)")
compare = pd.read_csv(compare_csv)
better = compare[compare.verdict == "improvement"]
print(better.groupby(["ablation", "provider", "mode", "head_dim"]).ratio.agg(["count", "min", "median", "max"]))

print("\n2. speed, head dim 256, ours fp16 TFLOP/s (median over repetitions): old, new")
for label, path in (("old", archive), ("new", run)):
    speed = rows(path, "speed")
    speed = speed[(speed.provider == "ours") & (speed.dtype == "fp16") & (speed.head_dim == 256)]
    print(label, speed.groupby(["mode", "causal", "seqlen_q"]).tflops.median().unstack("seqlen_q").round(0))

print("\n3. host ms per call at seqlen 512 (median over repetitions), fp16")
for label, path in (("old", archive), ("new", run)):
    speed = rows(path, "speed")
    speed = speed[(speed.seqlen_q == 512) & (speed.dtype == "fp16") & speed.provider.isin(["ours", "sdpa_flash"])]
    host = speed.groupby(["mode", "head_dim", "causal", "provider"]).host_ms.median().unstack("provider")
    host["ours_over_sdpa_flash"] = host["ours"] / host["sdpa_flash"]
    print(label, host.round(3), sep="\n")

print("\n4. fp8: ours_fp8 over ours (fp16), forward, speed-up = fp16 ms / fp8 ms")
fp8 = pd.read_csv(f"{run}/fp8.csv")
timed = fp8[(fp8.status == "ok") & (fp8.variant != "accuracy") & fp8.provider.isin(["ours", "ours_fp8"])]
ms = timed.groupby(["head_dim", "causal", "seqlen_q", "provider"]).ms.median().unstack("provider")
ms["speedup"] = ms["ours"] / ms["ours_fp8"]
ms["fp8_tflops"] = timed[timed.provider == "ours_fp8"].groupby(["head_dim", "causal", "seqlen_q"]).tflops.median()
ms["host_bound_reps"] = timed.groupby(["head_dim", "causal", "seqlen_q"]).host_bound.sum()
print(ms.round(3))
accuracy = fp8[fp8.variant == "accuracy"]
print(accuracy[["dtype", "head_dim", "causal", "seqlen_q", "err_o", "max_abs_err_o"]].to_string(index=False))

print("\n5. features, dropout, forward+backward median ms (and SDPA flash over ours)")
features = rows(run, "features")
drop = features[features.variant.str.startswith("dropout") & (features["mode"] == "fwd_bwd")]
table = drop.groupby(["causal", "seqlen_q", "provider", "variant"]).ms.median().unstack(["provider", "variant"])
for column in table.columns:
    if column[0] == "ours":
        table[("sdpa_over", column[1])] = table[("sdpa_flash", "dropout0.1")] / table[column]
print(table.round(3))

print("\n6. jit")
jit = pd.read_csv(f"{run}/jit.csv")
print(jit.drop(columns=[c for c in jit.columns if jit[c].nunique(dropna=False) <= 1]).to_string(index=False)[:3000])
