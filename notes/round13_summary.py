"""The v13 numbers of notes/perf.md: what the Hopper forward by default (head dim 128, sm_90) changed.

    .venv/bin/python notes/round13_summary.py > notes/round13/summary.txt

Reads notes/compare_round13/compare.csv (written by `snakemake --cores 1 compare --config "compare={baseline:
<the 1bca508 archive>, candidate: results/archive/nvidia-h200}"`, then copied here) and the archive's speed.csv
(commit 995c907). Speedups are baseline / candidate median time, so > 1 is faster now; `hb` marks a cell
that a repetition of either side ran host-bound (the GPU waited for the host), which decides no verdict.
"""
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    pd.set_option("display.width", 200)
    compare = pd.read_csv(ROOT / "notes" / "compare_round13" / "compare.csv")
    ours = compare[(compare["ablation"] == "speed") & (compare["provider"] == "ours")
                   & compare["mode"].isin(["fwd", "fwd_bwd"])].copy()
    ours["speedup"] = (1 / ours["ratio"]).round(2)
    ours["hb"] = ours["judged"].map(lambda judged: "" if judged else "hb")
    table = ours.pivot_table(index=["head_dim", "causal", "mode"], columns="seqlen_q", values="speedup")
    print("## speed, ours at 995c907 over ours at 1bca508 (baseline / candidate median ms)\n")
    print(table.to_string(), "\n")
    print("cells not judged (host-bound on either side):")
    for _, row in ours[ours["hb"] == "hb"].iterrows():
        print(f"  d{row.head_dim:.0f} causal={row.causal:.0f} {row['mode']} N={row.seqlen_q:.0f}: {row.speedup:.2f}x")
    d128 = ours[(ours["head_dim"] == 128) & ours["judged"].astype(bool)]
    for mode in ("fwd", "fwd_bwd"):
        picked = d128[d128["mode"] == mode]
        print(f"head dim 128 {mode}, judged cells: {picked.speedup.min():.2f}-{picked.speedup.max():.2f}x "
              f"over {len(picked)} cells (seqlens {', '.join(str(int(n)) for n in sorted(picked.seqlen_q.unique()))})")

    hopper = pd.read_csv(ROOT / "results" / "archive" / "nvidia-h200" / "hopper.csv")
    hopper = hopper[(hopper["status"] == "ok") & (hopper["provider"] == "ours") & (hopper["mode"] == "fwd")]
    medians = hopper.pivot_table(index=["head_dim", "causal", "seqlen_q"], columns="variant", values="ms",
                                 aggfunc="median")
    gain = (medians["portable"] / medians["hopper"]).rename("hopper over portable, forward")
    print("\n## hopper ablation at 995c907: the Hopper forward over the portable one (median ms ratio)\n")
    print(gain.round(2).unstack("seqlen_q").to_string())
    for head_dim, values in gain.groupby(level="head_dim"):
        print(f"head dim {head_dim:.0f}: {values.min():.2f}-{values.max():.2f}x")

    speed = pd.read_csv(ROOT / "results" / "archive" / "nvidia-h200" / "speed.csv")
    speed = speed[(speed["status"] == "ok") & (speed["mode"] == "fwd") & (speed["seqlen_q"] <= 1024)
                  & speed["provider"].isin(["ours", "sdpa_flash"])]
    host = speed.pivot_table(index=["head_dim", "causal", "seqlen_q"], columns="provider",
                             values=["host_ms", "gpu_ms"], aggfunc="median")
    print("\n## forward at 512 and 1024: host and GPU time per call, ms (median over repetitions, 995c907)\n")
    print(host.round(3).to_string())


if __name__ == "__main__":
    main()
