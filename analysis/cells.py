"""From repetitions to cells: the one place where the analysis aggregates timed rows and decides which
cells may decide a verdict. Claims, figures and facts all read their numbers through here.

A cell is one (experiment, provider, variant, mode, shape) measured in several repetitions. Its value is
the median over the repetitions that measured; its spread is min..max over them (the error bars of
the figures). A cell is kept out of verdicts when
  host-bound  any repetition says the GPU waited for the host (ms well above gpu_ms: it timed launches), or
  noisy       its repetitions disagree: (max - min) / median of ms above `noisy_spread` (claims.yaml),
and every claim says how many cells it left out and why. Memory is not a timing: host-bound or noisy
timing does not exclude a cell's memory. A cell aggregated on GPU_TIME (gpu_ms: the call's launches all
queued behind a sleep kernel, so no host gap shows, as in a CUDA-graph replay) cannot be host-bound; it is
noisy when its gpu_ms repetitions disagree.

This module does not judge claims (analysis/claims.py) or draw (analysis/figures.py).
"""
from __future__ import annotations

import copy
import functools
import os
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from analysis.load import CELL_KEYS, SHAPE_COLUMNS, TILE_COLUMNS, attention_rows, ceiling_rows, measured

CLAIMS_FILE = Path(__file__).with_name("claims.yaml")
TIMING_VALUES = ("ms", "tflops", "gpu_ms")
GPU_TIME = "gpu_ms"
# the ablations whose timed cells are judged on another value than ms (analysis/decode.py: the GPU's own time)
JUDGED_ON = {"decode": GPU_TIME}
HOST_BOUND, NOISY = "host-bound", "noisy"
PAIR_KEYS = SHAPE_COLUMNS + ["mode"]
# carried from a cell's first row (they are the same in every repetition of a run)
CARRIED = ["gpu", "driver", "cuda", "torch", "triton", "commit", "host_kind", "source", "note"]


def read_yaml(path: str | Path):
    """A YAML file's contents, parsed once per version of the file (claims.yaml is read by every aggregation, and
    parsing it in pure Python took 60 ms): a fresh copy each call, so a caller may change what it gets."""
    stat = os.stat(path)
    return copy.deepcopy(_parsed_yaml(str(Path(path).resolve()), stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=16)
def _parsed_yaml(path: str, mtime_ns: int, size: int):
    with open(path) as handle:
        return yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def read_settings(path: str | Path = CLAIMS_FILE) -> dict:
    """The aggregation settings in claims.yaml (noisy_spread: the relative spread above which a cell is noisy)."""
    return read_yaml(path)["aggregation"]


def cell_keys(frame: pd.DataFrame) -> list[str]:
    """What tells two cells apart: CELL_KEYS, and in the tile sweep the tile config too."""
    return CELL_KEYS + (TILE_COLUMNS if (frame["experiment"] == "tiles").any() else [])


def aggregate(frame: pd.DataFrame, value: str = "ms", keys: list[str] | None = None,
              settings: dict | None = None) -> pd.DataFrame:
    """One row per cell: the median of `value` over its measured repetitions, its min and max, the number of
    repetitions, the relative spread of ms (of gpu_ms when `value` is GPU_TIME), host_bound, noisy and
    `excluded` (the reason, or "").

    A cell with no measured repetition keeps the status and note of its failed rows (value NaN).
    """
    settings = settings or read_settings()
    keys = keys or cell_keys(frame)
    columns = keys + [c for c in CARRIED if c not in keys]
    if frame.empty:
        return pd.DataFrame(columns=columns + [value, f"{value}_min", f"{value}_max", "repetitions", "spread",
                                               "host_bound", "noisy", "excluded", "status"])
    ok = measured(frame).dropna(subset=[value])
    grouped = ok.groupby(keys, dropna=False, sort=False)
    cells = grouped[value].agg(["median", "min", "max", "size"]).rename(
        columns={"median": value, "min": f"{value}_min", "max": f"{value}_max", "size": "repetitions"})
    timing = grouped[GPU_TIME if value == GPU_TIME else "ms"].agg(["median", "min", "max"])
    cells["spread"] = (timing["max"] - timing["min"]) / timing["median"]
    cells["host_bound"] = grouped["host_bound"].max().fillna(0).astype(int)
    cells = cells.join(grouped[[c for c in CARRIED if c not in keys]].first()).reset_index()
    cells["status"] = "ok"
    judged = value in TIMING_VALUES
    cells["noisy"] = judged & (cells["spread"] > settings["noisy_spread"]).fillna(False)
    cells["excluded"] = np.where(judged & (value != GPU_TIME) & (cells["host_bound"] == 1), HOST_BOUND,
                                 np.where(cells["noisy"], NOISY, ""))
    failed = frame[frame["status"] != "ok"].drop_duplicates(keys)
    if not ok.empty:
        failed = failed.merge(cells[keys], on=keys, how="left", indicator=True)
        failed = failed[failed["_merge"] == "left_only"].drop(columns="_merge")
    failed = failed[columns + ["status"]].assign(repetitions=0, excluded="", noisy=False, host_bound=0)
    return pd.concat([cells, failed], ignore_index=True) if not failed.empty else cells


def eligible(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells that may decide a verdict: measured, not host-bound, not noisy."""
    return cells[(cells["status"] == "ok") & (cells["excluded"] == "")]


def _seqlens(cells: pd.DataFrame) -> str:
    values = sorted({int(n) for n in cells["seqlen_k"].dropna()})
    return ", ".join(str(n) for n in values)


def describe_exclusions(cells: pd.DataFrame, settings: dict | None = None, why: bool = True) -> str:
    """In words, the cells kept out of a verdict and why, e.g. "excluded: 3 host-bound cells at seqlen 512 (the
    GPU waited for the host)"; with why=False the cells alone ("3 host-bound cells at seqlen 512"), for a
    clause beside one that already says why."""
    settings = settings or read_settings()
    parts = []
    for reason, because in ((HOST_BOUND, "the GPU waited for the host"),
                            (NOISY, f"repetitions spread over {settings['noisy_spread']:.0%} of the median")):
        out = cells[cells["excluded"] == reason].drop_duplicates(CELL_KEYS)
        if not out.empty:
            plural = "s" if len(out) > 1 else ""
            where = f" at seqlen {_seqlens(out)}" if out["seqlen_k"].notna().any() else ""
            parts.append(f"{len(out)} {reason} cell{plural}{where}" + (f" ({because})" if why else ""))
    if not why:
        return "; ".join(parts) or "none"
    return ("excluded: " + "; ".join(parts)) if parts else "no cell excluded"


def exclusion_counts(cells: pd.DataFrame) -> dict:
    out = cells.drop_duplicates(CELL_KEYS)
    return {"host_bound": int((out["excluded"] == HOST_BOUND).sum()), "noisy": int((out["excluded"] == NOISY).sum())}


def select(frame: pd.DataFrame, arm: dict) -> pd.DataFrame:
    """Rows of `frame` whose columns equal the values in `arm` (e.g. {"provider": "standard"})."""
    mask = np.ones(len(frame), dtype=bool)
    for column, value in arm.items():
        mask &= (frame[column] == value).fillna(False).to_numpy()
    return frame[mask]


def paired(frame: pd.DataFrame, baseline: dict, candidate: dict, value: str = "ms",
           keys: list[str] = PAIR_KEYS) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Baseline cell over candidate cell (medians of `value`) at each `keys` where both arms have an eligible
    cell, with ratio_lo..ratio_hi from the repetitions' extremes; and the cells of either arm left out.

    Each arm must give one cell per `keys` (a claim that pairs across a column leaves it out of `keys`).
    """
    frame = attention_rows(frame)
    arms = {}
    left_out = []
    for name, arm in (("baseline", baseline), ("candidate", candidate)):
        cells = aggregate(select(frame, arm), value)
        left_out.append(cells[cells["excluded"] != ""])
        arms[name] = eligible(cells).set_index(keys)[[value, f"{value}_min", f"{value}_max"]]
        if arms[name].index.duplicated().any():
            raise ValueError(f"arm {arm} has several cells per {keys}: pair on more columns")
    pairs = arms["baseline"].merge(arms["candidate"], left_index=True, right_index=True,
                                   suffixes=("_baseline", "_candidate"))
    pairs = pd.DataFrame({
        "baseline": pairs[f"{value}_baseline"], "candidate": pairs[f"{value}_candidate"],
        "ratio": pairs[f"{value}_baseline"] / pairs[f"{value}_candidate"],
        "ratio_lo": pairs[f"{value}_min_baseline"] / pairs[f"{value}_max_candidate"],
        "ratio_hi": pairs[f"{value}_max_baseline"] / pairs[f"{value}_min_candidate"],
    }).reset_index()
    excluded = pd.concat(left_out, ignore_index=True) if any(len(c) for c in left_out) else left_out[0]
    return pairs, excluded


def interleaved_ceiling(frame: pd.DataFrame, dtype: str) -> dict | None:
    """The matmul ceiling measured beside `frame`'s attention rows, in `dtype`: the median TFLOP/s over its
    repetitions, with min and max; None where the file holds none."""
    matmuls = measured(ceiling_rows(frame))
    matmuls = matmuls[(matmuls["provider"] == "torch_matmul") & (matmuls["mode"] == "matmul")
                      & (matmuls["dtype"] == dtype)].dropna(subset=["tflops"])
    if matmuls.empty:
        return None
    return {"tflops": float(matmuls["tflops"].median()), "min": float(matmuls["tflops"].min()),
            "max": float(matmuls["tflops"].max()), "repetitions": len(matmuls), "dtype": dtype,
            "shape": ", ".join(sorted(set(matmuls["note"]) - {""})) or "-",
            "experiment": str(matmuls["experiment"].iloc[0])}


def matmul_ceiling(frames: dict[str, pd.DataFrame], experiment: str, dtype: str) -> dict | None:
    """The ceiling to read `experiment`'s rows against: the one interleaved with them, else ceiling.csv's."""
    for source in (experiment, "ceiling"):
        if source in frames:
            found = interleaved_ceiling(frames[source], dtype)
            if found:
                return found
    return None
