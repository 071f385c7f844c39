"""Read the results CSVs into pandas and check them against the tidy schema.

One function per concern: where a results file lives, reading and validating one file, reading all of
them. Validation fails loudly (SchemaError naming the file and the column) rather than letting a
malformed file turn into a silently wrong figure.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from experiments.schema import (ABLATIONS, COLUMNS, ERROR_COLUMNS, FLOAT_COLUMNS, INTEGER_COLUMNS, MODES,
                                PROVENANCE_COLUMNS, SHAPE_COLUMNS, STATUSES, TILE_COLUMNS, TIMING_COLUMNS)

EXPERIMENTS = ABLATIONS  # the analysis calls an ablation's results file an experiment


class SchemaError(ValueError):
    """A results file does not follow the tidy schema."""


def results_path(results_dir: str | Path, experiment: str) -> Path:
    return Path(results_dir) / f"{experiment}.csv"


def read_experiment(path: str | Path) -> pd.DataFrame:
    """Read one results CSV, check its columns and values, and return it with typed columns.

    Integer columns become pandas nullable integers (empty = <NA>), measurement columns floats,
    the rest strings with empty cells as "".
    """
    path = Path(path)
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing = [column for column in COLUMNS if column not in frame.columns]
    if missing:
        raise SchemaError(f"{path}: missing columns {missing}")
    for column in INTEGER_COLUMNS:
        frame[column] = _to_number(frame[column], path, column).astype("Int64")
    for column in FLOAT_COLUMNS:
        frame[column] = _to_number(frame[column], path, column).astype(float)
    bad_status = sorted(set(frame["status"]) - set(STATUSES))
    if bad_status:
        raise SchemaError(f"{path}: column status has values {bad_status}, expected one of {sorted(STATUSES)}")
    bad_mode = sorted(set(frame["mode"]) - set(MODES))
    if bad_mode:
        raise SchemaError(f"{path}: column mode has values {bad_mode}, expected one of {sorted(MODES)}")
    frame["variant"] = frame["variant"].replace("", "default")
    return frame


def _to_number(column: pd.Series, path: Path, name: str) -> pd.Series:
    numbers = pd.to_numeric(column.replace("", None), errors="coerce")
    unparsed = column[(column != "") & numbers.isna()]
    if not unparsed.empty:
        raise SchemaError(f"{path}: column {name} has non-numeric values {sorted(set(unparsed))[:5]}")
    return numbers


def read_results(results_dir: str | Path, experiments=EXPERIMENTS) -> dict[str, pd.DataFrame]:
    """All results files of `experiments`, keyed by experiment name."""
    return {experiment: read_experiment(results_path(results_dir, experiment)) for experiment in experiments}


def measured(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows whose measurement succeeded."""
    return frame[frame["status"] == "ok"]
