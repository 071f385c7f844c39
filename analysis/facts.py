"""Collect what the report says besides the verdicts: provenance, setup, summary tables, failures, figures.

Everything comes from the results CSVs and the analysis data files; the output (facts.json) is what the
paper templates read, so that no number in the report is typed by hand.

    python -m analysis.facts RESULTS_DIR FIGURES_DIR OUT_JSON
"""
from __future__ import annotations

import json
import sys
from importlib.metadata import version
from pathlib import Path

import pandas as pd

from analysis.catalog import FIGURES, caption, figure_paths
from analysis.claims import paired_ratio, to_json
from analysis.figures import MODE_TITLES, PROVIDERS, VARIANTS
from analysis.load import EXPERIMENTS, PROVENANCE_COLUMNS, measured, read_results
from analysis.peaks import datasheet_entry, main_gpu, matmul_ceiling, paper_gpu_entry, read_hardware

ANALYSIS_PACKAGES = ("pandas", "matplotlib", "seaborn", "jinja2", "snakemake")


def _values(column: pd.Series) -> str:
    """The distinct non-empty values of a column, joined (e.g. "fp16, bf16")."""
    items = [item for item in dict.fromkeys(column.dropna().astype(str)) if item != ""]
    return ", ".join(items) if items else "-"


def provenance(frames: dict[str, pd.DataFrame]) -> list[dict]:
    """One record per results file: where its rows came from, on what, when, and what they cover."""
    records = []
    for experiment in EXPERIMENTS:
        frame = frames[experiment]
        record = {"experiment": experiment, "rows": len(frame),
                  **{column: _values(frame[column]) for column in PROVENANCE_COLUMNS if column != "timestamp"},
                  "first": frame["timestamp"].min() if len(frame) else "-",
                  "last": frame["timestamp"].max() if len(frame) else "-",
                  "statuses": ", ".join(f"{count} {status}" for status, count in frame["status"].value_counts().items())}
        for column in ("dtype", "seqlen_k", "head_dim", "batch", "causal", "mode"):
            record[f"grid_{column}"] = _values(frame[column].sort_values()) if len(frame) else "-"
        records.append(record)
    return records


def setup(frames: dict[str, pd.DataFrame], hardware: dict) -> dict:
    gpu = main_gpu(frames)
    entry = datasheet_entry(gpu, hardware)
    ceiling = frames["ceiling"]
    matmuls = measured(ceiling)[ceiling["provider"] == "torch_matmul"]
    copies = measured(ceiling)[ceiling["provider"] == "torch_copy"]
    sources = sorted({source for frame in frames.values() for source in frame["source"] if source})
    return {
        "gpu": gpu or "unknown",
        "datasheet": entry,
        "paper_gpu": paper_gpu_entry(hardware),
        "ceilings": [{"dtype": dtype, "tflops": matmul_ceiling(ceiling, dtype), "shape": _values(rows["note"])}
                     for dtype, rows in matmuls.groupby("dtype")],
        "copies": [{"ms": row.ms, "note": row.note} for row in copies.itertuples()],
        "sources": sources,
        "archived": any(source.startswith("archive:") for source in sources),
        "host_kinds": sorted({kind for frame in frames.values() for kind in frame["host_kind"] if kind}),
        "versions": {column: _values(pd.concat([frame[column] for frame in frames.values()]))
                     for column in ("driver", "cuda", "torch", "triton", "commit")},
        "analysis_versions": {package: version(package) for package in ANALYSIS_PACKAGES},
    }


def speed_table(frames: dict[str, pd.DataFrame]) -> dict:
    """TFLOP/s per provider and pass at the longest sequence our kernel ran, largest head dim, non-causal."""
    rows = measured(frames["speed"])
    ours = rows[(rows["provider"] == "ours") & (rows["causal"] == 0)]
    if ours.empty:
        return {"shape": None, "rows": []}
    head_dim = ours["head_dim"].max()
    seqlen = ours[ours["head_dim"] == head_dim]["seqlen_k"].max()
    at = rows[(rows["head_dim"] == head_dim) & (rows["seqlen_k"] == seqlen) & (rows["causal"] == 0)]
    table = at.groupby(["provider", "mode"])["tflops"].median().unstack("mode")
    providers = [p for p in reversed(PROVIDERS) if p in table.index] + [p for p in table.index if p not in PROVIDERS]
    modes = [mode for mode in MODE_TITLES if mode in table.columns]
    return {"shape": {"head_dim": int(head_dim), "seqlen": int(seqlen), "dtype": _values(at["dtype"])},
            "modes": [MODE_TITLES[mode] for mode in modes],
            "rows": [{"provider": PROVIDERS.get(p, (p,))[0],
                      "tflops": [None if pd.isna(table.loc[p, m]) else float(table.loc[p, m]) for m in modes]}
                     for p in providers]}


def best_tiles(frames: dict[str, pd.DataFrame]) -> list[dict]:
    rows = measured(frames["tiles"]).dropna(subset=["tflops"])
    best = rows.loc[rows.groupby(["mode", "head_dim", "dtype"])["tflops"].idxmax()] if not rows.empty else rows
    worst = rows.groupby(["mode", "head_dim", "dtype"])["tflops"].min()
    return [{"mode": MODE_TITLES.get(row.mode, row.mode), "head_dim": int(row.head_dim), "dtype": row.dtype,
             "block_m": int(row.block_m), "block_n": int(row.block_n), "num_warps": int(row.num_warps),
             "num_stages": int(row.num_stages), "tflops": float(row.tflops),
             "over_worst": float(row.tflops / worst[(row.mode, row.head_dim, row.dtype)]),
             "configs": int(((rows["mode"] == row.mode) & (rows["head_dim"] == row.head_dim)).sum())}
            for row in best.itertuples()]


def fa1_steps(frames: dict[str, pd.DataFrame]) -> list[dict]:
    """Median speedup of each variant over the FA1-style kernel, per pass."""
    frame = frames["fa1_vs_fa2"]
    steps = []
    for variant in [v for v in VARIANTS if v in set(frame["variant"]) and v != "fa1_both"]:
        pairs = paired_ratio(frame, {"variant": "fa1_both"}, {"variant": variant})
        by_mode = pairs.groupby("mode")["ratio"].agg(["median", "min", "max", "size"])
        steps += [{"variant": VARIANTS[variant][0], "mode": MODE_TITLES.get(mode, mode), "median": row["median"],
                   "min": row["min"], "max": row["max"], "shapes": int(row["size"])}
                  for mode, row in by_mode.iterrows()]
    return steps


def failures(frames: dict[str, pd.DataFrame]) -> list[dict]:
    """Rows that did not measure, grouped by experiment, provider, variant, status and note."""
    rows = pd.concat([frame[frame["status"] != "ok"] for frame in frames.values()])
    if rows.empty:
        return []
    grouped = rows.groupby(["experiment", "provider", "variant", "status", "note"], dropna=False)
    return [{"experiment": experiment, "provider": provider, "variant": variant, "status": status, "note": note,
             "rows": len(group), "seqlens": _values(group["seqlen_k"].sort_values())}
            for (experiment, provider, variant, status, note), group in grouped]


def figures(figures_dir: str | Path) -> dict:
    return {name: {"caption": caption(name), "files": {fmt: path.name for fmt, path in figure_paths(name, figures_dir).items()}}
            for name in FIGURES}


def collect(frames: dict[str, pd.DataFrame], hardware: dict, figures_dir: str | Path) -> dict:
    return {"setup": setup(frames, hardware), "provenance": provenance(frames), "speed_table": speed_table(frames),
            "best_tiles": best_tiles(frames), "fa1_steps": fa1_steps(frames), "failures": failures(frames),
            "figures": figures(figures_dir)}


def main(results_dir: str, figures_dir: str, out_json: str) -> None:
    facts = collect(read_results(results_dir), read_hardware(), figures_dir)
    Path(out_json).parent.mkdir(parents=True, exist_ok=True)
    Path(out_json).write_text(json.dumps(facts, indent=2, default=to_json) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
