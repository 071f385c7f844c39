"""Where a full re-measure's device time goes: per ablation, from the archived run's own timestamps.

    .venv/bin/python notes/grid_budget.py [results/archive/nvidia-h200] > notes/grid_budget.txt

For each timed ablation of the archive: its cells per pass, the wall time of each pass (first to last
row timestamp of the pass; the next pass starts at the next row) and the first pass's excess over the
later ones (what it spent compiling in-process; gaps of over RESUME_GAP_S between rows, where a stopped
run resumed, count for nothing), and the kernel configurations the precompile compiles
for it on this config (experiments.measure.compile_representatives with the H200's 132 SMs). The
precompile's own time and the process start are not in the rows: they come on top. The archive's run
used two GPUs, so its ablations overlapped in wall time; the sums below are what one GPU would spend
measuring them one after another.
"""
import sys
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import kernels._decode  # noqa: E402
from experiments import grid, measure  # noqa: E402
from experiments.settings import ablation_settings, load_default  # noqa: E402

kernels._decode.sm_count = lambda device: 132  # the H200's, for the decode split counts
RESUME_GAP_S = 120  # no cell of the grid takes this long; a longer gap between rows is a resumed run


def main(folder: str) -> None:
    settings = ablation_settings(load_default(), grid.ABLATIONS)
    rows, arms = [], []
    for ablation in grid.TIMED_ABLATIONS:
        path = Path(folder) / f"{ablation}.csv"
        cells = grid.cells(ablation, settings[ablation], on_gpu=True)
        configs = len(measure.compile_representatives(cells, torch.device("cpu")))
        passes = max(1, settings[ablation].get("repetitions", 1))
        if not path.exists():
            rows.append(dict(ablation=ablation, cells_per_pass=len(cells) // passes, passes=passes,
                             precompile_configs=configs, first_pass_s=None, later_pass_s=None, measured_s=None))
            continue
        frame = pd.read_csv(path, low_memory=False)
        frame = frame[frame["repetition"].notna()]
        frame = frame.assign(t=pd.to_datetime(frame["timestamp"], format="ISO8601")).sort_values("t")
        # a pass's time: the gaps between its consecutive rows, where a gap over RESUME_GAP_S is a
        # stopped run resumed later (the archive's fa1_vs_fa2 spans sessions) and counts for nothing
        # each row's time: the gap to the row before it in its pass (the cell the row records)
        gaps = frame.groupby("repetition")["t"].diff().dt.total_seconds()
        frame = frame.assign(seconds=gaps.where(gaps <= RESUME_GAP_S, 0.0).fillna(0.0))
        seconds = frame.groupby("repetition")["seconds"].sum()
        arms.append(frame.groupby(["experiment", "provider", "variant"])["seconds"].sum())
        rows.append(dict(ablation=ablation, cells_per_pass=len(cells) // passes, passes=passes,
                         precompile_configs=configs, first_pass_s=seconds.iloc[0],
                         later_pass_s=seconds.iloc[1:].median() if len(seconds) > 1 else None,
                         measured_s=seconds.sum()))
    table = pd.DataFrame(rows).set_index("ablation")
    table["first_pass_excess_s"] = table["first_pass_s"] - table["later_pass_s"]
    print(table.round(0).to_string())
    print(f"\nmeasuring, all ablations one after another: {table['measured_s'].sum() / 60:.1f} min "
          f"(of which first-pass excess {table['first_pass_excess_s'].sum() / 60:.1f} min); "
          f"precompile configurations: {int(table['precompile_configs'].sum())}")
    by_arm = pd.concat(arms).sort_values(ascending=False)
    print("\nthe arms that take longest (seconds over all passes, each row counted from the row before it):")
    print(by_arm.head(15).round(0).to_string())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "results/archive/nvidia-h200")
