"""Set one run's results beside another's, cell by cell, with the run-to-run spread, and flag regressions.

This is the guard a kernel change runs before it republishes the archive: it reads the tidy CSVs of two
runs (a results/ directory or an archive directory, results/archive/<gpu>/), matches their cells and says,
for each, whether the candidate is slower, faster or the same within the noise the runs themselves show.
It reads CSVs and nothing else, so it runs on any host, without a GPU. Two uses:

    # archive against archive, on a CPU host
    python -m analysis.compare results/archive/nvidia-h200 some/other/archive --out analysis/build/compare

    # a fresh GPU run (results/) against the archive, failing if anything got worse
    python -m analysis.compare results/archive/nvidia-h200 results --out analysis/build/compare \
        --fail-on-regression

Options: `--ablations speed causal ...` (default: every ablation of experiments.schema.ABLATIONS whose
CSV both directories hold; one missing from a side is skipped with a note), `--threshold 0.05` (the
smallest change that counts, and the noise band of a side measured once), `--error-factor 2` (accuracy),
`--fail-on-regression` (exit 1 if any cell regressed; the exit code is 0 otherwise, whatever the verdicts).

Rules:
- A cell is experiments.schema.CELL_KEYS (experiment, provider, variant, mode, shape), plus the tile
  columns in `tiles` (its sweep differs only by tiles). Ceiling rows are cells like any other.
- Per side and cell, over its ok repetitions (a file without a repetition column has one): the median
  ms, its min and max, and the relative spread (max - min) / median. Host-bound repetitions
  (host_bound == 1) are left out where the cell has others; a cell with only host-bound ones keeps them,
  is marked host-bound and is listed but never judged (its ms measures launch overhead, not the kernel).
- ratio = candidate median / baseline median (> 1: slower). The noise band of a cell is the larger of
  the two sides' relative spreads, a side measured once counting as `--threshold`; a cell is a
  regression when ratio > 1 + max(band, threshold), an improvement when ratio < 1 - max(band, threshold),
  else within noise.
- Status: a side is ok (every repetition ok), mixed (some) or failed (none: its most common status). A
  cell whose status differs is a status change; one that fails where the baseline did not (ok -> mixed
  or failed, mixed -> failed) also counts as a regression. A cell that failed the same way on both sides
  is within noise (unchanged; it has no ratio).
- accuracy compares errors, not times: per error column (err_o .. err_dv) the ratio candidate /
  baseline; the cell's ratio is the worst of them, a regression when it exceeds `--error-factor`, an
  improvement when below its inverse. So do the cells of a timed ablation that hold errors and no time
  (fp8's accuracy cells).

Writes OUT/compare.csv (one row per cell: the keys; verdict, one of VERDICTS; regression, 1 when it
counts as one; judged, 0 for host-bound cells, whose verdict is shown but never counted; ratio, band and
margin = max(band, threshold); per side status, rows, n repetitions used, median, min, max, spread, tflops,
host_bound; accuracy's metric and per-error ratios) and OUT/compare.md (provenance of both sides, counts and ratio
percentiles per ablation, the worst regressions with their spreads), and prints the summary. It does not
decide what to republish, and it does not validate the files as strictly as analysis/load.py: old-schema
files (without the columns added since) load, the missing columns empty.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.schema import (ABLATIONS, CELL_KEYS, COLUMNS, ERROR_COLUMNS, FLOAT_COLUMNS, INTEGER_COLUMNS,
                                TILE_COLUMNS)

DEFAULT_THRESHOLD = 0.05
DEFAULT_ERROR_FACTOR = 2.0
WORST = 15  # rows in the summary's tables
SIDES = ("baseline", "candidate")
VERDICTS = ("regression", "improvement", "within noise", "status change", "only in baseline", "only in candidate")
# How badly a side failed: a status change towards a higher level is a regression.
FAILURE_LEVEL = {"ok": 0, "mixed": 1}  # any other status (every repetition failed): 2
SHOWN_PROVENANCE = ("gpu", "torch", "triton", "commit", "source")


# -- reading -------------------------------------------------------------------------------------------------

def read_results_file(path: str | Path) -> pd.DataFrame:
    """One results CSV, old schema or new: every schema column present (missing ones empty), typed.

    Integer columns become nullable integers, measurement columns floats, the rest strings ("" when empty).
    A value that is not a number in a numeric column fails loudly, naming the file and the column.
    """
    path = Path(path)
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    for column in COLUMNS:
        if column not in frame.columns:
            frame[column] = ""
    for column in INTEGER_COLUMNS + FLOAT_COLUMNS:
        text = frame[column].str.strip()
        numbers = pd.to_numeric(text.where(text != "", None), errors="coerce")
        unparsed = text[(text != "") & numbers.isna()]
        if not unparsed.empty:
            raise ValueError(f"{path}: column {column} has non-numeric values {sorted(set(unparsed))[:5]}")
        frame[column] = numbers.astype("Int64" if column in INTEGER_COLUMNS else float)
    frame["variant"] = frame["variant"].replace("", "default")
    return frame


def cell_columns(ablation: str) -> list[str]:
    return CELL_KEYS + (TILE_COLUMNS if ablation == "tiles" else [])


def _key_text(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The key columns as plain strings ("" when empty), so that cells match across files and NA == NA."""
    return pd.DataFrame({key: frame[key].astype(object).map(lambda value: "" if pd.isna(value) else str(value))
                         for key in keys}, index=frame.index)


# -- one side ------------------------------------------------------------------------------------------------

def side_status(statuses: pd.Series) -> str:
    """ok when every repetition is ok, mixed when some are, else the most common failure."""
    ok = statuses == "ok"
    if ok.all():
        return "ok"
    if ok.any():
        return "mixed"
    counts = Counter(statuses)
    return max(counts, key=lambda status: counts[status])


def _statistics(values: pd.Series) -> dict:
    """Median, min, max and relative spread (max - min) / median; the spread is unknown (NaN) below 2 values."""
    values = values.dropna()
    if values.empty:
        return {"n": 0, "median": np.nan, "min": np.nan, "max": np.nan, "spread": np.nan}
    median = float(values.median())
    spread = float((values.max() - values.min()) / median) if len(values) >= 2 and median > 0 else np.nan
    return {"n": len(values), "median": median, "min": float(values.min()), "max": float(values.max()),
            "spread": spread}


def holds_errors(ablation: str, rows: pd.DataFrame) -> bool:
    """Whether a cell's rows are compared by their errors: accuracy's, and a timed ablation's rows with errors and
    no time (fp8's accuracy cells)."""
    return ablation == "accuracy" or bool(rows["ms"].isna().all() and rows[ERROR_COLUMNS].notna().any().any())


def side_cells(frame: pd.DataFrame, ablation: str) -> pd.DataFrame:
    """One row per cell of one side: its status and the statistics of its ok repetitions.

    Timed ablations: ms over the repetitions (host-bound ones left out where the cell has others).
    accuracy: the median of each error column, for compare_cell to pick the worst ratio from.
    """
    keys = cell_columns(ablation)
    key_frame = _key_text(frame, keys)
    records = []
    for key, rows in frame.groupby([key_frame[column] for column in keys], sort=False):
        ok = rows[rows["status"] == "ok"]
        host_bound = ok["host_bound"].fillna(0) == 1
        used = ok[~host_bound] if (~host_bound).any() else ok
        record = dict(zip(keys, key), status=side_status(rows["status"]), rows=len(rows),
                      host_bound=int(len(ok) > 0 and bool(host_bound.all())), n_host_bound=int(host_bound.sum()),
                      errors=int(holds_errors(ablation, rows)))
        if record["errors"]:
            record.update(n=len(used), median=np.nan, min=np.nan, max=np.nan, spread=np.nan)
            record.update({column: used[column].median() for column in ERROR_COLUMNS})
        else:
            record.update(_statistics(used["ms"]))
        record["tflops"] = used["tflops"].median()
        records.append(record)
    return pd.DataFrame.from_records(records)


# -- the two sides together ----------------------------------------------------------------------------------

def _present(value) -> bool:
    return isinstance(value, str)


def _failure_level(status: str) -> int:
    return FAILURE_LEVEL.get(status, 2)


def _error_ratio(baseline: float, candidate: float) -> float:
    if pd.isna(baseline) or pd.isna(candidate):
        return np.nan
    if baseline == 0:
        return 1.0 if candidate == 0 else np.inf
    return candidate / baseline


def compare_cell(cell: dict, ablation: str, threshold: float, error_factor: float) -> dict:
    """The verdict of one cell (a dict of its baseline_* and candidate_* statistics)."""
    if not _present(cell["candidate_status"]):
        return {"verdict": "only in baseline", "regression": 0, "judged": 0}
    if not _present(cell["baseline_status"]):
        return {"verdict": "only in candidate", "regression": 0, "judged": 0}
    out = {"metric": "ms", "judged": int(not (cell["baseline_host_bound"] or cell["candidate_host_bound"]))}
    if ablation == "accuracy" or cell["baseline_errors"] == 1 or cell["candidate_errors"] == 1:
        ratios = {f"ratio_{column}": _error_ratio(cell[f"baseline_{column}"], cell[f"candidate_{column}"])
                  for column in ERROR_COLUMNS}
        out.update(ratios)
        known = {name: ratio for name, ratio in ratios.items() if not pd.isna(ratio)}
        if known:
            worst = max(known, key=known.get)
            metric = worst.removeprefix("ratio_")
            out.update(metric=metric, ratio=known[worst], baseline_median=cell[f"baseline_{metric}"],
                       candidate_median=cell[f"candidate_{metric}"])
        else:
            out.update(metric="", ratio=np.nan)
        out.update(band=error_factor - 1, margin=error_factor - 1)
        slower, faster = error_factor, 1 / error_factor
    else:
        if cell["baseline_median"] > 0:
            out["ratio"] = cell["candidate_median"] / cell["baseline_median"]
        else:
            out["ratio"] = np.nan
        # each side's own run-to-run spread; a side measured once is assumed to be as noisy as the threshold
        band = max(threshold if cell[f"{side}_n"] < 2 or pd.isna(cell[f"{side}_spread"]) else cell[f"{side}_spread"]
                   for side in SIDES)
        margin = max(band, threshold)
        out.update(band=band, margin=margin)
        slower, faster = 1 + margin, 1 - margin
    if cell["baseline_status"] != cell["candidate_status"]:
        newly_failed = _failure_level(cell["candidate_status"]) > _failure_level(cell["baseline_status"])
        out.update(verdict="status change", regression=int(newly_failed))
        return out
    ratio = out["ratio"]
    verdict = ("regression" if ratio > slower else "improvement" if ratio < faster else "within noise")
    out.update(verdict=verdict, regression=int(verdict == "regression" and out["judged"] == 1))
    return out


OUTPUT_COLUMNS = (["ablation", *CELL_KEYS, *TILE_COLUMNS, "verdict", "regression", "judged", "ratio", "band",
                   "margin", "metric"]
                  + [f"{side}_{name}" for name in ("status", "rows", "n", "median", "min", "max", "spread",
                                                   "tflops", "host_bound", "n_host_bound") for side in SIDES]
                  + [f"ratio_{column}" for column in ERROR_COLUMNS])


def compare_ablation(baseline: pd.DataFrame, candidate: pd.DataFrame, ablation: str,
                     threshold: float = DEFAULT_THRESHOLD, error_factor: float = DEFAULT_ERROR_FACTOR) -> pd.DataFrame:
    """One row per cell found on either side, in the order the baseline (then the candidate) lists them."""
    keys = cell_columns(ablation)
    sides = {}
    for side, frame in zip(SIDES, (baseline, candidate)):
        cells = side_cells(frame, ablation)
        if cells.empty:
            cells = pd.DataFrame(columns=keys + ["status"])
        sides[side] = cells.rename(columns={column: f"{side}_{column}" for column in cells.columns
                                            if column not in keys})
    cells = pd.concat([sides["baseline"][keys], sides["candidate"][keys]]).drop_duplicates(ignore_index=True)
    cells = cells.merge(sides["baseline"], on=keys, how="left").merge(sides["candidate"], on=keys, how="left")
    verdicts = pd.DataFrame.from_records(
        [compare_cell(cell, ablation, threshold, error_factor) for cell in cells.to_dict("records")], index=cells.index)
    # the verdict's columns win (accuracy's medians are those of its worst error)
    cells = cells.drop(columns=[column for column in verdicts.columns if column in cells.columns]).join(verdicts)
    cells.insert(0, "ablation", ablation)
    return cells.reindex(columns=OUTPUT_COLUMNS)


# -- summary -------------------------------------------------------------------------------------------------

RATIO_VERDICTS = ("regression", "improvement", "within noise")


def summarise(cells: pd.DataFrame) -> dict:
    """Counts of one ablation's verdicts and the median, 10th and 90th percentile of its judged ratios.

    A compared cell is one of: within noise, improvement, slower beyond the band, status change, host-bound
    (not judged); the regressions are those slower beyond the band plus the status changes that newly fail.
    """
    judged = cells["judged"] == 1
    by_ratio = cells["verdict"].isin(RATIO_VERDICTS)
    status_change = cells["verdict"] == "status change"
    ratios = cells.loc[judged & by_ratio, "ratio"].replace([np.inf, -np.inf], np.nan).dropna()
    return {
        "compared": int((by_ratio | status_change).sum()),
        "regressions": int(cells["regression"].sum()),  # slower beyond the band, or newly failed
        "improvements": int(((cells["verdict"] == "improvement") & judged).sum()),
        "within noise": int(((cells["verdict"] == "within noise") & judged).sum()),
        "status changes": int(status_change.sum()),
        "host-bound": int((by_ratio & ~judged).sum()),
        "newly failed": int((status_change & (cells["regression"] == 1)).sum()),
        "only in baseline": int((cells["verdict"] == "only in baseline").sum()),
        "only in candidate": int((cells["verdict"] == "only in candidate").sum()),
        "median ratio": ratios.median() if len(ratios) else np.nan,
        "p10": ratios.quantile(0.1) if len(ratios) else np.nan,
        "p90": ratios.quantile(0.9) if len(ratios) else np.nan,
    }


def describe_cell(cell: dict) -> str:
    """e.g. "ours/default fwd fp16 B16 H32 N1024x1024 D64 causal", leaving out what is empty."""
    kv_heads = f"/{cell['kv_heads']}" if cell["kv_heads"] not in ("", cell["heads"]) else ""
    parts = [f"{cell['provider']}/{cell['variant']}", cell["mode"], cell["dtype"],
             f"B{cell['batch']}" if cell["batch"] != "" else "",
             f"H{cell['heads']}{kv_heads}" if cell["heads"] != "" else "",
             f"N{cell['seqlen_q']}x{cell['seqlen_k']}" if cell["seqlen_q"] != "" else "",
             f"D{cell['head_dim']}" if cell["head_dim"] != "" else "",
             "causal" if cell["causal"] == "1" else ""]
    if isinstance(cell.get("block_m"), str) and cell["block_m"] != "":
        parts.append("tile {block_m}x{block_n} w{num_warps} s{num_stages}".format(**cell))
    return " ".join(part for part in parts if part)


def _number(value, digits: int = 4) -> str:
    return "-" if pd.isna(value) else f"{value:.{digits}g}"


def _ratio(value) -> str:
    return "-" if pd.isna(value) else f"{value:.3f}"


def _percent(value) -> str:
    return "-" if pd.isna(value) else f"{100 * value:.1f}%"


def _side_text(cell: dict, side: str) -> str:
    """e.g. "0.2458 ms [0.2451, 0.2463] n=3 (spread 0.5%)", or accuracy's "err_dq 3.1e-04"."""
    if cell["ablation"] == "accuracy" or str(cell["metric"]).startswith("err_"):
        return f"{cell['metric']} {_number(cell[f'{side}_median'], 3)}"
    text = f"{_number(cell[f'{side}_median'])} ms"
    if cell[f"{side}_n"] >= 2:
        text += (f" [{_number(cell[f'{side}_min'])}, {_number(cell[f'{side}_max'])}] n={int(cell[f'{side}_n'])}"
                 f" (spread {_percent(cell[f'{side}_spread'])})")
    elif cell[f"{side}_n"] == 1:
        text += " n=1"
    return text + (" host-bound" if cell[f"{side}_host_bound"] == 1 else "")


def _table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(value) for value in row) + " |" for row in rows]


def _cell_table(cells: pd.DataFrame) -> list[str]:
    records = cells.head(WORST).to_dict("records")
    return _table(["ablation", "cell", "baseline", "candidate", "ratio", "band", "margin"],
                  [[cell["ablation"], describe_cell(cell), _side_text(cell, "baseline"), _side_text(cell, "candidate"),
                    _ratio(cell["ratio"]), _percent(cell["band"]), _percent(cell["margin"])] for cell in records])


# -- provenance ----------------------------------------------------------------------------------------------

def _distinct(frames: list[pd.DataFrame], column: str) -> list[str]:
    values = pd.concat([frame[column] for frame in frames]) if frames else pd.Series(dtype=str)
    return [value for value in dict.fromkeys(values.astype(str)) if value not in ("", "nan")]


def provenance_lines(label: str, directory: Path, frames: list[pd.DataFrame]) -> list[str]:
    """What one side was measured on: from its rows' provenance columns and, if there, provenance.json."""
    def join(values) -> str:
        return ", ".join(values) if values else "-"

    rows = {column: _distinct(frames, column) for column in SHOWN_PROVENANCE}
    rows["commit"] = [commit[:12] for commit in rows["commit"]]
    stamps = _distinct(frames, "timestamp")
    lines = [f"- {label} `{directory}` (rows): gpu {join(rows['gpu'])}; torch {join(rows['torch'])}; "
             f"triton {join(rows['triton'])}; commit {join(rows['commit'])}; source {join(rows['source'])}; "
             f"measured {min(stamps) if stamps else '-'} .. {max(stamps) if stamps else '-'}"]
    path = directory / "provenance.json"
    if path.is_file():
        record = json.loads(path.read_text())

        def listed(key: str) -> list[str]:
            value = record.get(key, [])
            return [str(item) for item in (value if isinstance(value, list) else [value])]

        lines.append(f"  - provenance.json: gpu {join(listed('gpu'))}; torch {join(listed('torch'))}; "
                     f"triton {join(listed('triton'))}; commit {join(c[:12] for c in listed('commit'))}; "
                     f"archived {record.get('archived_at', '-')}")
    return lines


# -- the whole comparison ------------------------------------------------------------------------------------

def compare_dirs(baseline_dir: str | Path, candidate_dir: str | Path, ablations=None,
                 threshold: float = DEFAULT_THRESHOLD,
                 error_factor: float = DEFAULT_ERROR_FACTOR) -> tuple[pd.DataFrame, str]:
    """compare.csv's rows for every ablation both directories hold, and the Markdown summary."""
    directories = {"baseline": Path(baseline_dir), "candidate": Path(candidate_dir)}
    notes, parts, frames = [], [], {side: [] for side in SIDES}
    for ablation in ablations or ABLATIONS:
        missing = [side for side in SIDES if not (directories[side] / f"{ablation}.csv").is_file()]
        if missing:
            where = "either directory" if len(missing) == 2 else f"the {missing[0]} directory"
            notes.append(f"{ablation}: skipped, no {ablation}.csv in {where}")
            continue
        baseline, candidate = (read_results_file(directories[side] / f"{ablation}.csv") for side in SIDES)
        frames["baseline"].append(baseline)
        frames["candidate"].append(candidate)
        parts.append(compare_ablation(baseline, candidate, ablation, threshold, error_factor))
    cells = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=OUTPUT_COLUMNS)
    return cells, render(cells, directories, frames, notes, threshold, error_factor)


def render(cells: pd.DataFrame, directories: dict, frames: dict, notes: list[str], threshold: float,
           error_factor: float) -> str:
    lines = [f"# {directories['candidate']} against {directories['baseline']}", ""]
    for side in SIDES:
        lines += provenance_lines(side, directories[side], frames[side])
    gpus = {side: set(_distinct(frames[side], "gpu")) for side in SIDES}
    if all(gpus.values()) and gpus["baseline"] != gpus["candidate"]:
        lines.append("- the sides were measured on different GPUs: the ratios compare GPUs, not only code")
    lines += ["", f"ratio = candidate / baseline median ms (> 1: slower). Noise band of a cell: the larger of the "
              f"two sides' relative spreads (max - min) / median over repetitions, {_percent(threshold)} for a side "
              f"measured once; regression when ratio > 1 + max(band, {_percent(threshold)}), improvement when "
              f"ratio < 1 - max(band, {_percent(threshold)}). accuracy: the worst ratio of err_o .. err_dv, "
              f"regression above {error_factor:g}x. Host-bound cells are listed, not judged; a cell that newly "
              f"fails is a regression.", ""]
    header = ["ablation", "compared", "regressions", "improvements", "within noise", "status changes",
              "host-bound", "only in baseline", "only in candidate", "median ratio", "p10", "p90"]
    rows = []
    for ablation, group in cells.groupby("ablation", sort=False):
        summary = summarise(group)
        newly_failed = f" ({summary['newly failed']} newly failed)" if summary["newly failed"] else ""
        rows.append([ablation, summary["compared"], f"{summary['regressions']}{newly_failed}",
                     *(summary[name] for name in header[3:9]),
                     *(_ratio(summary[name]) for name in ("median ratio", "p10", "p90"))])
    lines += _table(header, rows) if rows else ["No ablation in both directories."]
    lines += [""] + [f"- {note}" for note in notes] + ([""] if notes else [])
    total = int(cells["regression"].sum()) if len(cells) else 0
    lines.append(f"**{total} regression{'s' if total != 1 else ''}** in {len(cells)} cells.")
    worst = cells[(cells["verdict"] == "regression") & (cells["regression"] == 1)].sort_values("ratio", ascending=False)
    if len(worst):
        lines += ["", f"## Worst regressions ({min(len(worst), WORST)} of {len(worst)})", ""] + _cell_table(worst)
    changes = cells[cells["verdict"] == "status change"]
    if len(changes):
        changes = changes.assign(
            status=changes["baseline_status"] + " -> " + changes["candidate_status"]
        ).sort_values("regression", ascending=False, kind="stable")
        lines += ["", f"## Status changes ({min(len(changes), WORST)} of {len(changes)}; newly failed first)", ""]
        lines += _table(["ablation", "cell", "status", "regression"],
                        [[cell["ablation"], describe_cell(cell), cell["status"], "yes" if cell["regression"] else "no"]
                         for cell in changes.head(WORST).to_dict("records")])
    host_bound = cells[(cells["judged"] == 0) & cells["verdict"].isin(RATIO_VERDICTS)]
    if len(host_bound):
        slower = host_bound[host_bound["verdict"] == "regression"].sort_values("ratio", ascending=False)
        lines += ["", f"## Host-bound cells, not judged ({len(host_bound)}; {len(slower)} slower beyond the band)", ""]
        lines += _cell_table(slower if len(slower) else host_bound)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.compare", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("baseline", type=Path, help="directory of <ablation>.csv files: the reference run")
    parser.add_argument("candidate", type=Path, help="directory of <ablation>.csv files: the run under test")
    parser.add_argument("--out", type=Path, required=True, help="directory for compare.csv and compare.md")
    parser.add_argument("--ablations", nargs="+", choices=ABLATIONS, metavar="ABLATION",
                        help=f"some of {', '.join(ABLATIONS)} (default: every one both directories hold)")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                        help="smallest relative change that counts, and the band of a side measured once (0.05)")
    parser.add_argument("--error-factor", type=float, default=DEFAULT_ERROR_FACTOR,
                        help="accuracy: error growth that is a regression (2)")
    parser.add_argument("--fail-on-regression", action="store_true", help="exit 1 if any cell regressed")
    args = parser.parse_args(argv)
    for side in SIDES:
        if not getattr(args, side).is_dir():
            parser.error(f"{side} {getattr(args, side)} is not a directory")
    cells, summary = compare_dirs(args.baseline, args.candidate, args.ablations, args.threshold, args.error_factor)
    args.out.mkdir(parents=True, exist_ok=True)
    cells.to_csv(args.out / "compare.csv", index=False)
    (args.out / "compare.md").write_text(summary)
    print(summary, end="")
    regressed = len(cells) > 0 and cells["regression"].sum() > 0
    return 1 if args.fail_on_regression and regressed else 0


if __name__ == "__main__":
    sys.exit(main())
