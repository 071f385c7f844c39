"""The v15 and v16 numbers of notes/perf.md: the Gluon backward in the `hopper` ablation.

    .venv/bin/python notes/round15_summary.py results/archive/nvidia-h200 > notes/round16/summary.txt

The argument is a results folder holding hopper.csv; the default is results/archive/nvidia-h200, the
pipeline's own rows of the published grid. notes/round15_partial/summary.txt was written from that archive at
commit 8a451f2 (four steps over two sessions, `bash notes/h200_measure.sh 8a451f2 sN <targets>`);
notes/round16/summary.txt from it at 1e32447 (four device calls over two sessions, `bash notes/h200_measure.sh
1e32447 sN results archive`). TFLOP/s are medians over the repetitions; a ratio is ours' median time over the peer's
turned around (> 1: ours faster), both measured in the same process. `hb` counts repetitions that ran
host-bound (the GPU waited for the host); `spread` is the largest (p80 - p20) / median of a cell's rows.
"""
import sys
from pathlib import Path

import pandas as pd

ARCHIVE = Path(__file__).resolve().parent.parent / "results" / "archive" / "nvidia-h200"


def main(folder: Path = ARCHIVE) -> None:
    pd.set_option("display.width", 220)
    rows = pd.read_csv(folder / "hopper.csv", dtype={"commit": str})  # 1e32447 reads as a float otherwise
    print("commits:", ", ".join(sorted(rows["commit"].unique())), "| gpu:", rows["gpu"].iloc[0])
    rows = rows[(rows["status"] == "ok") & rows["mode"].isin(["bwd", "fwd_bwd"])].copy()
    rows["arm"] = rows["provider"].where(rows["provider"] != "ours", "ours:" + rows["variant"])
    rows["spread"] = (rows["ms_p80"] - rows["ms_p20"]) / rows["ms"]
    keys = ["mode", "head_dim", "causal", "seqlen_q"]
    ms = rows.pivot_table(index=keys, columns="arm", values="ms", aggfunc="median")
    tflops = rows.pivot_table(index=keys, columns="arm", values="tflops", aggfunc="median")
    table = pd.DataFrame({
        "portable_tflops": tflops["ours:portable"],
        "gluon_tflops": tflops["ours:hopper_bwd"],
        "cudnn_tflops": tflops["sdpa_cudnn"],
        "gluon/portable": ms["ours:portable"] / ms["ours:hopper_bwd"],
        "gluon/cudnn": ms["sdpa_cudnn"] / ms["ours:hopper_bwd"],
        "hb": rows.groupby(keys)["host_bound"].sum(),
        "spread": rows.groupby(keys)["spread"].max(),
    })
    table.index = table.index.set_levels([table.index.levels[1].astype(int), table.index.levels[2].astype(int),
                                          table.index.levels[3].astype(int)], level=[1, 2, 3])
    print("\n## hopper ablation: the backward in one pass (Gluon, arm hopper_bwd, after the Hopper forward) against")
    print("## the portable backward (arm portable: portable forward and backward) and cuDNN, fp16\n")
    print(table.round(2).to_string())
    for mode in ("bwd", "fwd_bwd"):
        for head_dim in (64, 128):
            for causal in (0, 1):
                cell = table.loc[(mode, head_dim, causal)]
                print(f"{mode:7s} d{head_dim} causal={causal}: gluon/portable {cell['gluon/portable'].min():.2f}-"
                      f"{cell['gluon/portable'].max():.2f}, gluon/cudnn {cell['gluon/cudnn'].min():.2f}-"
                      f"{cell['gluon/cudnn'].max():.2f} (seqlens {', '.join(map(str, cell.index))})")
    print(f"\ncells with a host-bound repetition: {int((table['hb'] > 0).sum())} of {len(table)}; "
          f"largest spread {table['spread'].max():.3f}")
    clocks = rows.groupby("arm")[["sm_clock_mhz", "power_w", "temp_c"]].agg(["min", "max"]).round(0)
    print("\nclock (MHz), power (W), temperature (C) over the rows, by arm:\n" + clocks.to_string())


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ARCHIVE)
