"""Read the results CSVs into pandas and check them against the tidy schema.

One function per concern: where a results file lives, reading and validating one file, reading all of
them. Validation fails loudly (SchemaError naming the file and the column) rather than letting a
malformed file turn into a silently wrong figure.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from experiments.schema import (ABLATIONS, CEILING_PROVIDERS, CELL_KEYS, COLUMNS, ERROR_COLUMNS, FLOAT_COLUMNS,
                                INTEGER_COLUMNS, JIT_CACHES, JIT_COLUMNS, JIT_TIMES, LOSS_COLUMNS, MEMORY_COLUMNS, MODES, PROVENANCE_COLUMNS,
                                SHAPE_COLUMNS, STATUSES, TELEMETRY_COLUMNS, TILE_COLUMNS, TIMED_ABLATIONS,
                                TIMING_COLUMNS)
from experiments.schema import LATER_COLUMNS  # columns absent from older files (decode's, fp8's)

EXPERIMENTS = ABLATIONS  # the analysis calls an ablation's results file an experiment


class SchemaError(ValueError):
    """A results file does not follow the tidy schema."""


def results_path(results_dir: str | Path, experiment: str) -> Path:
    return Path(results_dir) / f"{experiment}.csv"


def read_experiment(path: str | Path) -> pd.DataFrame:
    """Read one results CSV, check its columns and values, and return it with typed columns.

    The columns must be exactly experiments/schema.py's (a file of an older schema, or one with an
    unknown column, is refused). Integer columns become pandas nullable integers (empty = <NA>),
    measurement columns floats, the rest strings with empty cells as "". A timed row that measured
    must say which repetition it is and whether it was host-bound.
    """
    path = Path(path)
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    for column in LATER_COLUMNS:  # a file written before these columns: they read as empty
        if column not in frame.columns:
            frame[column] = ""
    missing = [column for column in COLUMNS if column not in frame.columns]
    if missing:
        raise SchemaError(f"{path}: missing columns {missing} (written by an older schema? see experiments/schema.py)")
    unknown = [column for column in frame.columns if column not in COLUMNS]
    if unknown:
        raise SchemaError(f"{path}: unknown columns {unknown}, not in experiments/schema.py")
    for column in INTEGER_COLUMNS:
        frame[column] = _to_number(frame[column], path, column).astype("Int64")
    for column in FLOAT_COLUMNS:
        frame[column] = _to_number(frame[column], path, column).astype(float)
    _check_values(frame, path, "status", STATUSES)
    _check_values(frame, path, "mode", MODES)
    bad_flag = sorted(set(frame["host_bound"].dropna()) - {0, 1})
    if bad_flag:
        raise SchemaError(f"{path}: column host_bound has values {bad_flag}, expected 0 or 1")
    # rows that measured errors (the fp8 ablation's accuracy cells, beside its timings) are not timings
    timed = frame[frame["experiment"].isin(TIMED_ABLATIONS) & (frame["status"] == "ok") & frame["err_o"].isna()]
    for column in ("repetition", "ms", "host_bound"):
        if timed[column].isna().any():
            raise SchemaError(f"{path}: {int(timed[column].isna().sum())} measured timed rows without {column}")
    frame["variant"] = frame["variant"].replace("", "default")
    return frame[COLUMNS]


def _to_number(column: pd.Series, path: Path, name: str) -> pd.Series:
    numbers = pd.to_numeric(column.replace("", None), errors="coerce")
    unparsed = column[(column != "") & numbers.isna()]
    if not unparsed.empty:
        raise SchemaError(f"{path}: column {name} has non-numeric values {sorted(set(unparsed))[:5]}")
    return numbers


def read_results(results_dir: str | Path, experiments=EXPERIMENTS) -> dict[str, pd.DataFrame]:
    """The results files of `experiments` that `results_dir` holds, keyed by experiment name.

    An experiment without a file was not measured: on a host without a GPU the workflow leaves out an
    ablation that the archived GPU run does not hold (experiments/rules.smk). It has no key here; the
    claims, figures and facts that read it say "not measured" (see `not_measured`).
    """
    return {experiment: read_experiment(results_path(results_dir, experiment)) for experiment in experiments
            if results_path(results_dir, experiment).exists()}


def not_measured(frames: dict[str, pd.DataFrame], experiments=EXPERIMENTS) -> list[str]:
    """The experiments that have no results file among `frames`."""
    return [experiment for experiment in experiments if experiment not in frames]


def _read_side_file(results_dir: str | Path, name: str, columns: list[str], integers, floats) -> tuple:
    """(path, frame) of results/<name>.csv with exactly `columns`, the `integers` and `floats` columns
    typed; frame is empty (those columns) when the run has no such file."""
    path = results_path(results_dir, name)
    if not path.exists():
        return path, pd.DataFrame(columns=columns)
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    if list(frame.columns) != columns:
        raise SchemaError(f"{path}: columns {list(frame.columns)}, expected {columns} (experiments/schema.py)")
    for column in integers:
        frame[column] = _to_number(frame[column], path, column).astype("Int64")
    for column in floats:
        frame[column] = _to_number(frame[column], path, column).astype(float)
    return path, frame


def _check_values(frame: pd.DataFrame, path: Path, column: str, allowed) -> None:
    bad = sorted(set(frame[column]) - set(allowed))
    if bad:
        raise SchemaError(f"{path}: column {column} has values {bad}, expected one of {sorted(allowed)}")


def read_loss(results_dir: str | Path) -> pd.DataFrame:
    """training's loss-agreement curves (results/training_loss.csv: provider, seed, step, loss and provenance),
    checked like a results file; empty when the run has none."""
    return _read_side_file(results_dir, "training_loss", LOSS_COLUMNS, ("seed", "step"), ("loss",))[1]


def read_jit(results_dir: str | Path) -> pd.DataFrame:
    """The jit ablation's rows (results/jit.csv: one per measuring process, experiments/jit.py), checked like a
    results file; empty when the run has none (not measured, or not in the archive)."""
    path, frame = _read_side_file(results_dir, "jit", JIT_COLUMNS,
                                  ("batch", "heads", "seqlen", "head_dim", "causal", "repetition", "concurrent"),
                                  JIT_TIMES)
    _check_values(frame, path, "cache", JIT_CACHES)
    _check_values(frame, path, "status", STATUSES)
    ok = frame[frame["status"] == "ok"]
    if ok[JIT_TIMES].isna().any().any():
        raise SchemaError(f"{path}: {int(ok[JIT_TIMES].isna().any(axis=1).sum())} ok rows without their times")
    return frame


def measured(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows whose measurement succeeded."""
    return frame[frame["status"] == "ok"]


def attention_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows that time attention: without the matmul and copy ceilings measured beside them."""
    return frame[~frame["provider"].isin(CEILING_PROVIDERS)]


def ceiling_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The matmul and copy ceilings of a results file (interleaved with a timed ablation, or ceiling.csv)."""
    return frame[frame["provider"].isin(CEILING_PROVIDERS)]
