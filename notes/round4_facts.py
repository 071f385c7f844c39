"""The backward numbers quoted in notes/perf.md's "v4" section, read from the archived H200 run.

    python notes/round4_facts.py [ARCHIVE_DIR] [OLD_ARCHIVE_DIR]

ARCHIVE_DIR defaults to results/archive/nvidia-h200 (run bd87479). OLD_ARCHIVE_DIR, optional, is
the previous archive (run 6eb820e: `git worktree add /tmp/old bcf2fb8`, then
/tmp/old/results/archive/nvidia-h200); with it, ours' speed cells are printed before and after.

1. fa1_vs_fa2: the default backward (dQ by atomic adds in the dK/dV kernel) against the dq_kernel
   arm (deterministic=True: dQ from its own kernel), TFLOP/s medians over repetitions, same run.
2. speed (with OLD_ARCHIVE_DIR): ours, fp16, TFLOP/s and host ms per call, before and after.
"""
import sys

import pandas as pd

archive = sys.argv[1] if len(sys.argv) > 1 else "results/archive/nvidia-h200"
pd.set_option("display.width", 200)
pd.set_option("display.max_rows", 500)

arms = pd.read_csv(f"{archive}/fa1_vs_fa2.csv")
arms = arms[(arms.status == "ok") & arms.variant.isin(["fa2", "dq_kernel"]) & arms["mode"].isin(["bwd", "fwd_bwd"])]
table = arms.groupby(["head_dim", "causal", "mode", "seqlen_q", "variant"]).tflops.median().unstack("variant")
table["atomic_over_dq_kernel"] = table.fa2 / table.dq_kernel
print("backward TFLOP/s: fa2 (atomic dQ, the default) and dq_kernel (deterministic=True):")
print(table.round(2).to_string())
print("atomic / dq_kernel by head dim and mode (median over shapes):")
print(table.groupby(["head_dim", "mode"]).atomic_over_dq_kernel.agg(["min", "median", "max"]).round(2).to_string())

if len(sys.argv) > 2:
    def ours(path):
        rows = pd.read_csv(f"{path}/speed.csv")
        rows = rows[(rows.provider == "ours") & (rows.status == "ok") & (rows.dtype == "fp16")]
        return rows.groupby(["head_dim", "causal", "mode", "seqlen_q"]).agg(
            tflops=("tflops", "median"), host_ms=("host_ms", "median"))
    both = ours(sys.argv[2]).join(ours(archive), lsuffix="_before", rsuffix="_after")
    both["speedup"] = both.tflops_after / both.tflops_before
    print("ours, speed ablation, before (run 6eb820e) and after (run bd87479):")
    print(both.round(3).to_string())
