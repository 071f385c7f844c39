"""The numbers quoted in notes/perf.md's "v5" section, read from the archived H200 runs.

    python notes/round5_facts.py OLD_ARCHIVE_DIR [ARCHIVE_DIR]

ARCHIVE_DIR defaults to results/archive/nvidia-h200 (run 919b2d3). OLD_ARCHIVE_DIR is the previous
archive (run bd87479): `git worktree add /tmp/old 0715ed3`, then /tmp/old/results/archive/nvidia-h200.

1. speed: ours' fp16 TFLOP/s before and after, by head dim, mask and mode (median over seqlens
   2k-16k), and at head dim 256 per length; host ms per call at seqlen 512.
2. features: each arm's TFLOP/s before and after, and the ratios the claims use (ours with the
   feature over ours plain; over its peer).
3. fa1_vs_fa2: the dQ-kernel default against the atomic-dQ arm in the same run.
"""
import sys

import pandas as pd

old = sys.argv[1]
new = sys.argv[2] if len(sys.argv) > 2 else "results/archive/nvidia-h200"
pd.set_option("display.width", 200)
pd.set_option("display.max_rows", 500)


def ok(path, name):
    rows = pd.read_csv(f"{path}/{name}.csv")
    return rows[(rows.status == "ok") & (rows.dtype == "fp16")]


def speed(path):
    rows = ok(path, "speed")
    return rows[rows.provider == "ours"].groupby(["head_dim", "causal", "mode", "seqlen_q"]).agg(
        tflops=("tflops", "median"), host_ms=("host_ms", "median"))


both = speed(old).join(speed(new), how="outer", lsuffix="_before", rsuffix="_after")
both["after_over_before"] = both.tflops_after / both.tflops_before
long = both[both.index.get_level_values("seqlen_q") >= 2048]
print("1. ours, speed ablation, TFLOP/s after over before (median over seqlen 2k-16k):")
print(long.groupby(["head_dim", "causal", "mode"]).after_over_before.median().unstack("mode").round(3).to_string())
print("\nhead dim 256, TFLOP/s before -> after:")
print(both.loc[256].tflops_before.unstack("mode").round(0).join(both.loc[256].tflops_after.unstack("mode").round(0),
                                                                  lsuffix=" before", rsuffix=" after").to_string())
print("\nhost ms per call at seqlen 512, before -> after:")
print(both.xs(512, level="seqlen_q")[["host_ms_before", "host_ms_after"]].round(3).to_string())


def features(path):
    rows = ok(path, "features")
    return rows.groupby(["provider", "variant", "mode", "causal", "seqlen_q"]).tflops.median()


f_old, f_new = features(old), features(new)
table = pd.DataFrame({"before": f_old, "after": f_new})
table["after_over_before"] = table.after / table.before
print("\n2. features ablation, TFLOP/s:")
print(table.round(3).to_string())
ours_new = f_new.loc["ours"]
ours_old = f_old.loc["ours"]
for variant in ("softcap30", "alibi", "dropout0.1"):
    for label, ours_ in (("before", ours_old), ("after", ours_new)):
        ratio = (ours_[variant] / ours_["plain"]).dropna()
        print(f"{variant} over plain ({label}): {ratio.groupby(level='mode').agg(['min', 'max']).round(3).to_dict()}")
drop = (f_new.loc["ours"]["dropout0.1"] / f_new.loc["sdpa_flash"]["dropout0.1"])
print("dropout ours over sdpa_flash (after), by mode:", drop.groupby(level="mode").agg(["min", "max"]).round(3).to_dict())

arms = ok(new, "fa1_vs_fa2")
arms = arms[arms.variant.isin(["fa2", "atomic_dq"]) & arms["mode"].isin(["bwd", "fwd_bwd"])]
arm_table = arms.groupby(["head_dim", "causal", "mode", "seqlen_q", "variant"]).tflops.median().unstack("variant")
arm_table["dq_kernel_over_atomic"] = arm_table.fa2 / arm_table.atomic_dq
print("\n3. fa1_vs_fa2: default (dQ kernel) over the atomic_dq arm, same run, by head dim and mode:")
print(arm_table.groupby(["head_dim", "mode"]).dq_kernel_over_atomic.agg(["min", "median", "max"]).round(3).to_string())
