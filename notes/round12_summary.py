"""The v12 tables of notes/perf.md, from the probe CSVs of the one-pass Hopper backward.

    .venv/bin/python notes/round12_summary.py > notes/round12_summary.txt

Reads notes/hopper_bwd_tiles_h200.csv (ten tile configs, backward), notes/hopper_bwd_noreduce_h200.csv
(the default tiles with and without the dQ reduce-add) and notes/hopper_v12_probe_h200.csv (the
`hopper` ablation's grid with the hopper_bwd arm, run by hand through experiments.run). Each value is
the median TFLOP/s over the passes of a cell (fp16, the paper's shapes); ratios are of those medians.
"""
from pathlib import Path

import pandas as pd

NOTES = Path(__file__).resolve().parent


def medians(path: Path) -> pd.DataFrame:
    frame = pd.read_csv(path)
    frame = frame[(frame["status"] == "ok") & (frame["provider"] != "torch_matmul")]
    frame = frame.assign(arm=frame["provider"].str.replace("sdpa_", "") + ":" + frame["variant"])
    return frame.groupby(["mode", "head_dim", "causal", "seqlen_q", "arm"])["tflops"].median().unstack("arm")


def main() -> None:
    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 30)
    tiles = medians(NOTES / "hopper_bwd_tiles_h200.csv")
    print("## Backward TFLOP/s per tile config (hopper_bwd_tiles_h200.csv; blank: did not run)\n")
    print(tiles.round(0).to_string(na_rep=""), "\n")
    noreduce = medians(NOTES / "hopper_bwd_noreduce_h200.csv")
    print("## The dQ reduce-add's share (hopper_bwd_noreduce_h200.csv), backward TFLOP/s\n")
    print(noreduce.round(0).to_string(na_rep=""), "\n")
    default = "ours:hopper_bwd:64x128x8x3"
    # time is inversely proportional to TFLOP/s on the same cell
    without_over_with = noreduce[default] / noreduce["ours:hopper_bwd_noreduce:64x128x8x3"]
    print("time without the reduce over time with it, default tiles, per cell in the order above:",
          ", ".join(f"{v:.2f}" for v in without_over_with))
    print("without the reduce, speed over the portable backward's:",
          ", ".join(f"{v:.2f}" for v in noreduce["ours:hopper_bwd_noreduce:64x128x8x3"] / noreduce["ours:portable"]),
          "\n")
    grid = medians(NOTES / "hopper_v12_probe_h200.csv")
    print("## The hopper ablation's grid with the one-pass backward (hopper_v12_probe_h200.csv), TFLOP/s\n")
    print(grid.round(0).to_string(na_rep=""), "\n")
    print("## Ratios, per cell\n")
    bwd = grid.loc["bwd"]
    fwd_bwd = grid.loc["fwd_bwd"]
    fwd = grid.loc["fwd"]
    table = pd.DataFrame({
        "bwd one-pass/portable": bwd["ours:hopper_bwd"] / bwd["ours:portable"],
        "bwd one-pass/cuDNN": bwd["ours:hopper_bwd"] / bwd["cudnn:default"],
        "bwd portable/cuDNN": bwd["ours:portable"] / bwd["cudnn:default"],
        "fwd_bwd one-pass/hopper": fwd_bwd["ours:hopper_bwd"] / fwd_bwd["ours:hopper"],
        "fwd hopper/cuDNN": fwd["ours:hopper"] / fwd["cudnn:default"],
        "fwd hopper/portable": fwd["ours:hopper"] / fwd["ours:portable"],
        "fwd_bwd hopper/portable": fwd_bwd["ours:hopper"] / fwd_bwd["ours:portable"],
        "fwd_bwd hopper/cuDNN": fwd_bwd["ours:hopper"] / fwd_bwd["cudnn:default"],
    })
    print(table.round(2).to_string())


if __name__ == "__main__":
    main()
