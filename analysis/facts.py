"""Collect what the report says besides the verdicts: provenance, setup, summary tables, failures, figures.

Everything comes from the results CSVs and the analysis data files; the output (facts.json) is what the
paper templates read, so that no number in the report is typed by hand.

    python -m analysis.facts RESULTS_DIR FIGURES_DIR OUT_JSON
"""
from __future__ import annotations

import ast
import json
import re
import sys
from importlib.metadata import version
from pathlib import Path

import pandas as pd

from experiments import flops

from analysis.catalog import FIGURES, caption, figure_paths
from analysis.cells import (JUDGED_ON, aggregate, describe_exclusions, eligible, exclusion_counts,
                            interleaved_ceiling, read_settings)
from analysis.claims import and_join, head_dims_words, paired_ratio, to_json
from analysis.figures import MODE_TITLES, PROVIDERS, VARIANTS
from analysis.load import (CELL_KEYS, EXPERIMENTS, PROVENANCE_COLUMNS, TILE_COLUMNS, TIMED_ABLATIONS, attention_rows,
                           measured, not_measured, read_jit, read_loss, read_results)
from analysis.decode import facts as decode_facts
from analysis.fp8 import facts as fp8_facts
from analysis.peaks import datasheet_entry, main_gpu, paper_gpu_entry, read_hardware

ANALYSIS_PACKAGES = ("pandas", "matplotlib", "seaborn", "jinja2", "snakemake")


def _values(column: pd.Series) -> str:
    """The distinct non-empty values of a column, joined (e.g. "fp16, bf16")."""
    items = [item for item in dict.fromkeys(column.dropna().astype(str)) if item != ""]
    return ", ".join(items) if items else "-"


# the grid columns of the provenance table, and the column of a side file that holds each (jit.csv: seqlen)
GRID_COLUMNS = ("dtype", "seqlen_k", "head_dim", "batch", "causal", "mode")
SIDE_GRID = {"seqlen_k": "seqlen"}


def provenance(frames: dict[str, pd.DataFrame], side: dict[str, pd.DataFrame] | None = None) -> list[dict]:
    """One record per results file: where its rows came from, on what, when, and what they cover; the ablations'
    files, then the files written beside them (`side`: training_loss.csv, jit.csv), so that every file the
    report reads is listed, as the archive's provenance.json lists them."""
    records = []
    files = [(name, frames[name]) for name in EXPERIMENTS if name in frames] + list((side or {}).items())
    for experiment, frame in files:
        statuses = (frame["status"].value_counts().items() if "status" in frame else [])
        record = {"experiment": experiment, "rows": len(frame),
                  **{column: _values(frame[column]) for column in PROVENANCE_COLUMNS if column != "timestamp"},
                  "first": frame["timestamp"].min() if len(frame) else "-",
                  "last": frame["timestamp"].max() if len(frame) else "-",
                  "statuses": ", ".join(f"{count} {status}" for status, count in statuses) or f"{len(frame)} rows"}
        for column in GRID_COLUMNS:
            found = column if column in frame else SIDE_GRID.get(column)
            record[f"grid_{column}"] = (_values(frame[found].sort_values()) if len(frame) and found in frame
                                        else "-")
        records.append(record)
    return records


def side_files(jit_rows: pd.DataFrame | None, loss_rows: pd.DataFrame | None) -> dict[str, pd.DataFrame]:
    """The files written beside the ablations' results that the run holds, by name (training_loss, jit)."""
    return {name: rows for name, rows in (("training_loss", loss_rows), ("jit", jit_rows))
            if rows is not None and not rows.empty}


VERSION_COLUMNS = ("driver", "cuda", "torch", "triton")


def hosts(frames: dict[str, pd.DataFrame]) -> list[dict]:
    """One record per host that produced rows (GPU run or CPU interpreter): its own software versions, commits,
    dates and the files it measured. Versions of two hosts are never merged into one line."""
    rows = pd.concat([frame.assign(file=name) for name, frame in frames.items() if len(frame)], ignore_index=True) \
        if any(len(frame) for frame in frames.values()) else None
    if rows is None:
        return []
    records = []
    for (kind, gpu, source), group in rows.groupby(["host_kind", "gpu", "source"], dropna=False, sort=False):
        records.append({
            "kind": kind or "unrecorded", "gpu": gpu or "no GPU", "source": source,
            "label": (f"{gpu} (GPU)" if kind == "cuda" else "CPU, Triton's interpreter" if kind == "cpu-interpreter"
                      else kind or "unrecorded host"),
            **{column: _values(group[column]) for column in VERSION_COLUMNS},
            "commits": _values(group["commit"]), "commit_count": group["commit"].replace("", pd.NA).nunique(),
            "first": group["timestamp"].min(), "last": group["timestamp"].max(),
            "files": ", ".join(dict.fromkeys(group["file"])), "rows": len(group)})
    return records


def setup(frames: dict[str, pd.DataFrame], hardware: dict, side: dict[str, pd.DataFrame] | None = None) -> dict:
    """The GPU, its datasheet entry and measured ceilings, and the hosts and software behind every file (the
    ablations' `frames` and the `side` files beside them)."""
    gpu = main_gpu(frames)
    entry = datasheet_entry(gpu, hardware)
    copies = measured(frames["ceiling"])
    copies = copies[copies["provider"] == "torch_copy"]
    sources = sorted({source for frame in frames.values() for source in frame["source"] if source})
    ceilings = [found for name in TIMED_ABLATIONS if name in frames
                for dtype in sorted(set(frames[name]["dtype"]) - {""})
                if (found := interleaved_ceiling(frames[name], dtype))]
    return {
        "gpu": gpu or "unknown",
        "datasheet": entry,
        "paper_gpu": paper_gpu_entry(hardware),
        "ceilings": ceilings,
        "copies": [{"ms": row.ms, "note": row.note} for row in copies.itertuples()],
        "sources": sources,
        "archived": any(source.startswith("archive:") for source in sources),
        "host_kinds": sorted({kind for frame in frames.values() for kind in frame["host_kind"] if kind}),
        "hosts": hosts({**frames, **(side or {})}),
        "analysis_versions": {package: version(package) for package in ANALYSIS_PACKAGES},
    }


def method(frames: dict[str, pd.DataFrame]) -> dict:
    """How the timed numbers were made, from the rows: repetitions per cell, exclusions (of cells aggregated on
    ms, or on the value an ablation is judged on: analysis.cells.JUDGED_ON), telemetry ranges."""
    settings = read_settings()
    per_experiment, counts = [], {"host_bound": 0, "noisy": 0, "cells": 0}
    for name in [name for name in TIMED_ABLATIONS if name in frames]:
        frame = attention_rows(frames[name])
        if frame.empty:
            continue
        cells = aggregate(frame, JUDGED_ON.get(name, "ms"), settings=settings)
        ok = cells[cells["status"] == "ok"]
        found = exclusion_counts(ok)
        counts = {key: counts[key] + found.get(key, 0) for key in ("host_bound", "noisy")} | {
            "cells": counts["cells"] + len(ok)}
        per_experiment.append({"experiment": name, "cells": len(ok),
                               "repetitions": _range(ok["repetitions"], "{:.0f}"), **found,
                               "host_bound_seqlens": _values(ok[ok["excluded"] == "host-bound"]["seqlen_k"]
                                                             .sort_values()),
                               "spread_median": float(ok["spread"].median()) if len(ok) else None})
    timed = pd.concat([attention_rows(frames[name]) for name in TIMED_ABLATIONS if name in frames])
    timed = measured(timed)
    sampled = timed[timed["telemetry_samples"].fillna(0) > 0]
    telemetry = {"rows": len(sampled), "of": len(timed),
                 "clock": _range(sampled["sm_clock_mhz"], "{:.0f}"), "power": _range(sampled["power_w"], "{:.0f}"),
                 "temp": _range(sampled["temp_c"], "{:.0f}")}
    return {"noisy_spread": settings["noisy_spread"], "experiments": per_experiment, "totals": counts,
            "telemetry": telemetry}


MEASURE_MODULE = Path(__file__).parents[1] / "experiments" / "measure.py"


def host_bound_excess(path: str | Path = MEASURE_MODULE) -> float:
    """experiments.measure.HOST_BOUND_EXCESS, the share by which a row's median may exceed its GPU time before the
    row is host-bound, read from the module's source (importing it would import torch, Triton and the kernels)."""
    for node in ast.parse(Path(path).read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(target, "id", None) == "HOST_BOUND_EXCESS"
                                                for target in node.targets):
            return float(ast.literal_eval(node.value))
    raise ValueError(f"{path} assigns no HOST_BOUND_EXCESS")


def method_text(setup_facts: dict, method_facts: dict) -> list[str]:
    """The method section, item by item, in plain text (rendered by both report formats)."""
    reps = ", ".join(f"{item['experiment']} {item['repetitions']}" for item in method_facts["experiments"]) or "none"
    telemetry = method_facts["telemetry"]
    ceilings = "; ".join(f"{c['experiment']} {c['dtype']} {c['tflops']:.0f} TFLOP/s (repetitions {c['min']:.0f}-"
                         f"{c['max']:.0f})" for c in setup_facts["ceilings"]) or "none measured"
    return [
        "Repetitions: each timed ablation ran its whole grid several times, one repetition after the other, so the "
        f"repetitions of a cell are minutes apart (repetitions per cell: {reps}). Every timed number in this report "
        "is a cell's median over its repetitions; its spread is the repetitions' minimum to maximum (the error bars).",
        "Timing within a repetition: triton.testing.do_bench after warm-up, the median over its calls, with the L2 "
        "cache flushed between calls; the 20th and 80th percentiles are kept in the results.",
        "Host-bound cells: beside that wall-clock median each row has the GPU-only time of one call (gpu_ms, every "
        "launch queued behind a sleep kernel so host gaps cannot show). A row whose median exceeds its GPU time by "
        f"more than {host_bound_excess():.0%} (experiments/measure.py, HOST_BOUND_EXCESS) is host-bound: it timed "
        "launch overhead, not the kernel. A cell with any host-bound repetition decides no verdict. Decoding is judged on the GPU time itself "
        "(analysis/decode.py: a serving loop replays its steps in CUDA graphs), so none of its cells is host-bound.",
        f"Noisy cells: a cell whose repetitions spread (max - min) over more than {method_facts['noisy_spread']:.0%} "
        "of their median decides no verdict (the threshold is set once, in analysis/claims.yaml). Each claim says "
        "how many cells it left out and why.",
        f"Telemetry: SM clock, power and temperature sampled through NVML during each row's timing "
        f"({telemetry['rows']} of {telemetry['of']} measured rows have samples).",
        "Memory: attention's own footprint is the call's peak allocation net of everything the process held before "
        "it (so workspaces kept alive by earlier calls do not count); the total adds the bytes of its inputs (q, k, "
        "v and, with a backward, dO).",
        f"Ceilings: each repetition of a timed ablation also timed an 8192-cube matmul before its attention cells; "
        f"shares of the measured ceiling read the median of these interleaved matmuls of the same dtype ({ceilings}); "
        "the peak-fraction verdicts read their fastest repetition, since one that ran on a clocked-down GPU lowers "
        "the median.",
        "FLOP count (the paper's, experiments/flops.py): forward 4 x batch x heads x seqlen_q x seqlen_k x "
        "head_dim, halved for causal attention when seqlen_q = seqlen_k; backward "
        f"{flops.MODE_FACTOR['bwd']:g} times the forward (five matmuls against two); forward + backward "
        f"{flops.MODE_FACTOR['fwd_bwd']:g} times. TFLOP/s is that count over the median time.",
        "Accuracy: relative L2 error |x - ref| / |ref| against a float64 reference, one run per shape (errors do "
        "not vary between runs).",
    ]


def threats_text(frames: dict[str, pd.DataFrame], setup_facts: dict, method_facts: dict) -> list[str]:
    """Every caveat that remains, in plain text, computed from the rows where it can be."""
    totals, telemetry = method_facts["totals"], method_facts["telemetry"]
    gpus = [host for host in setup_facts["hosts"] if host["kind"] == "cuda"]
    commits = sorted({commit for host in gpus for commit in host["commits"].split(", ") if commit != "-"})
    host_bound = "; ".join(f"{item['host_bound']} in {item['experiment']}.csv at sequence length"
                           f"{'s' if ',' in item['host_bound_seqlens'] else ''} {item['host_bound_seqlens']}"
                           for item in method_facts["experiments"] if item["host_bound"]) or "none"
    noisy = "; ".join(f"{item['noisy']} in {item['experiment']}.csv" for item in method_facts["experiments"]
                      if item["noisy"]) or "none"
    spreads = [c for c in setup_facts["ceilings"] if c["dtype"] == "fp16"]
    ceiling_range = (f"{min(c['min'] for c in spreads):.0f}-{max(c['max'] for c in spreads):.0f} TFLOP/s"
                     if spreads else "not measured")
    accuracy = frames["accuracy"]
    items = [
        f"One GPU model ({setup_facts['gpu']}), one process per ablation: timings can differ on another card of "
        "the same model, and cells were not run in fresh processes; their repetitions are passes over the grid "
        "minutes apart within that process. Ablations of one run may go to several GPUs of one host at once "
        "(--resources gpu=N); each ablation stays on one GPU, so the ratios within it compare cells of one "
        "card, and the archive's logs name the device of each.",
        f"Host-bound cells kept out of verdicts: {totals['host_bound']} of {totals['cells']} measured cells "
        f"({host_bound}).",
        f"Noisy cells kept out of verdicts: {totals['noisy']} ({noisy}).",
        (f"Clock, power and temperature over the measured rows: SM clock {telemetry['clock']} MHz, power "
         f"{telemetry['power']} W, temperature {telemetry['temp']} C; the fp16 matmul ceiling varied "
         f"{ceiling_range} across repetitions." if telemetry["rows"] else
         "No clock, power or temperature was recorded for these rows, so throttling cannot be ruled out."),
        f"A different GPU from the paper's: {setup_facts['gpu']} against the {setup_facts['paper_gpu']['name']}; "
        "shares of peak are compared across generations whose matmul units and memory differ.",
        "The FlashAttention-1 arm is our Triton port of its algorithm, not the original CUDA FlashAttention; the "
        "single-change arms are our FlashAttention-2 kernel with one change undone.",
        "FlexAttention is compiled by torch.compile per shape; compilation is outside the timed calls, and it was "
        "measured at a few sequence lengths only.",
        "The peers (SDPA flash, cuDNN, memory-efficient, FlexAttention) are the builds that ship with PyTorch "
        f"{', '.join(sorted({h['torch'] for h in gpus})) or '-'}, not the projects' own releases.",
        "FlashAttention-1's memory figure was measured with dropout and a padding mask, which we do not run.",
    ]
    if (accuracy["host_kind"] == "cpu-interpreter").any():
        items.append("Accuracy here was measured on the CPU by Triton's interpreter on small shapes, not on the GPU "
                     "(the published report reads it from the GPU run).")
    if len(commits) > 1:
        items.append(f"The GPU rows come from {len(commits)} commits ({', '.join(commits)}), whose kernels may differ.")
    if any(source == "synthetic" for source in setup_facts["sources"]):
        items.insert(0, "These results are synthetic (analysis/synthetic.py): the report shows its layout, not "
                        "measurements.")
    return items


def _range(column: pd.Series, fmt: str) -> str:
    column = column.dropna()
    if column.empty:
        return "-"
    low, high = fmt.format(column.min()), fmt.format(column.max())
    return low if low == high else f"{low}-{high}"


def speed_table(frames: dict[str, pd.DataFrame]) -> dict:
    """TFLOP/s per provider and pass at the longest sequence our kernel ran, non-causal, at head dim 128 (the
    paper's headline shape) where it was measured, else the largest."""
    rows = attention_rows(measured(frames["speed"]))
    rows = rows[rows["dtype"] == "fp16"] if (rows["dtype"] == "fp16").any() else rows
    ours = rows[(rows["provider"] == "ours") & (rows["causal"] == 0)]
    if ours.empty:
        return {"shape": None, "rows": []}
    head_dim = 128 if (ours["head_dim"] == 128).any() else ours["head_dim"].max()
    seqlen = ours[ours["head_dim"] == head_dim]["seqlen_k"].max()
    at = rows[(rows["head_dim"] == head_dim) & (rows["seqlen_k"] == seqlen) & (rows["causal"] == 0)]
    cells = aggregate(at, "tflops")
    table = cells[cells["status"] == "ok"].groupby(["provider", "mode"])["tflops"].median().unstack("mode")
    providers = [p for p in reversed(PROVIDERS) if p in table.index] + [p for p in table.index if p not in PROVIDERS]
    modes = [mode for mode in MODE_TITLES if mode in table.columns]
    return {"shape": {"head_dim": int(head_dim), "seqlen": int(seqlen), "dtype": _values(at["dtype"])},
            "modes": [MODE_TITLES[mode] for mode in modes],
            "rows": [{"provider": PROVIDERS.get(p, (p,))[0],
                      "tflops": [None if pd.isna(table.loc[p, m]) else float(table.loc[p, m]) for m in modes]}
                     for p in providers]}


def best_tiles(frames: dict[str, pd.DataFrame]) -> dict:
    """The fastest tile configuration per pass, head dim and dtype, read from cells (analysis.cells.aggregate:
    the median TFLOP/s over repetitions), among the eligible ones (host-bound and noisy cells left out, as in
    the verdicts); over the slowest eligible cell; and how many configurations the sweep tried there (each
    once, however many repetitions measured it), with the engine's default beside them. `excluded` says which
    cells were left out."""
    settings = read_settings()
    cells = aggregate(attention_rows(frames["tiles"]), "tflops", settings=settings)
    ok = eligible(cells).dropna(subset=["tflops"])
    rows = []
    for (mode, head_dim, dtype), group in ok.groupby(["mode", "head_dim", "dtype"], sort=True):
        best = group.loc[group["tflops"].idxmax()]
        tried = cells[(cells["mode"] == mode) & (cells["head_dim"] == head_dim) & (cells["dtype"] == dtype)]
        sweep = tried[tried["variant"] != "default"].drop_duplicates(TILE_COLUMNS)
        has_default = bool((tried["variant"] == "default").any())
        rows.append({"mode": MODE_TITLES.get(mode, mode), "head_dim": int(head_dim), "dtype": dtype,
                     "block_m": int(best["block_m"]), "block_n": int(best["block_n"]),
                     "num_warps": int(best["num_warps"]), "num_stages": int(best["num_stages"]),
                     "default": best["variant"] == "default", "tflops": float(best["tflops"]),
                     "repetitions": int(best["repetitions"]),
                     "over_worst": float(best["tflops"] / group["tflops"].min()),
                     "configs": len(sweep), "with_default": has_default,
                     "configs_text": f"{len(sweep)} + default" if has_default else str(len(sweep))})
    return {"rows": rows, "excluded": describe_exclusions(cells[cells["status"] == "ok"], settings)}


def fa1_steps(frames: dict[str, pd.DataFrame]) -> list[dict]:
    """Median speedup of each arm over our FlashAttention-1 port (variant fa1), per pass, fp16."""
    frame = attention_rows(frames["fa1_vs_fa2"])
    frame = frame[frame["dtype"] == "fp16"]
    steps = []
    for variant in [v for v in VARIANTS if v in set(frame["variant"]) and v != "fa1"]:
        pairs = paired_ratio(frame, {"variant": "fa1"}, {"variant": variant})
        by_mode = pairs.groupby("mode")["ratio"].agg(["median", "min", "max", "size"])
        steps += [{"variant": VARIANTS[variant][0], "mode": MODE_TITLES.get(mode, mode), "median": row["median"],
                   "min": row["min"], "max": row["max"], "shapes": int(row["size"])}
                  for mode, row in by_mode.iterrows()]
    return steps


NOTE_WIDTH = 120


def _note_shown(note: str, width: int = NOTE_WIDTH) -> str:
    """A failure's note as the table shows it: an error type written twice ("OutOfMemoryError: OutOfMemoryError:
    CUDA out of memory") said once, and a note longer than `width` cut after its last whole sentence within it
    (else its last whole word), its closing punctuation dropped, then "..."."""
    while (match := re.match(r"([\w.]+): \1: ", note)):
        note = note[len(match.group(1)) + 2:]
    if len(note) <= width:
        return note
    cut = note[:width + 1]
    sentence = cut.rfind(". ")
    if sentence > width // 2:
        cut = cut[:sentence]
    elif " " in cut:
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip(" .,;:") + "..."


def failures(frames: dict[str, pd.DataFrame]) -> list[dict]:
    """Cells that did not measure, grouped by what tells them apart (experiment, provider, variant, status and
    the note as shown, its first row's where the repetitions' notes differ), with the passes, head dims and
    lengths each group covers, how many cells (CELL_KEYS: one per shape, pass and arm, however many
    repetitions failed) and how many rows."""
    rows = pd.concat([frame[frame["status"] != "ok"] for frame in frames.values()])
    if rows.empty:
        return []
    shown = rows.drop_duplicates(CELL_KEYS + ["status"]).set_index(CELL_KEYS + ["status"])["note"].map(_note_shown)
    rows = rows.join(shown.rename("shown"), on=CELL_KEYS + ["status"])
    grouped = rows.groupby(["experiment", "provider", "variant", "status", "shown"], dropna=False)
    records = []
    for (experiment, provider, variant, status, note), group in grouped:
        records.append({"experiment": experiment, "provider": provider, "variant": variant, "status": status,
                        "note": note, "cells": len(group.drop_duplicates(CELL_KEYS)), "rows": len(group),
                        "modes": _values(group["mode"]), "head_dims": _values(group["head_dim"].sort_values()),
                        "causal": _values(group["causal"].sort_values()),
                        "seqlens": _values(group["seqlen_k"].sort_values())})
    return records


TRAINING_FLOPS = ("Model FLOPs per token, the FlashAttention-2 paper's count following Megatron-LM "
                  "(experiments/training.py): 6 P + 12 L h s, where P = 12 L h^2 + V h is the matmul weights "
                  "(the tied LM head once), L the layers, h the hidden size, s the context and V the vocabulary; the "
                  "attention term is not halved for the causal mask, as in the paper's Table 1. TFLOP/s per GPU is "
                  "that count times the tokens of a step over the median step time.")


def training(frames: dict[str, pd.DataFrame], hardware: dict) -> dict:
    """The training table (the paper's Table 1: model TFLOP/s per GPU by model, context and attention, with
    tokens/s, model FLOPs utilisation against the datasheet peak and the matmul ceiling measured beside it,
    and peak memory), or measured=False when the run holds no training.csv."""
    if "training" not in frames:
        return {"measured": False, "rows": [], "flops": TRAINING_FLOPS}
    frame = attention_rows(frames["training"])
    train = frame[frame["mode"] == "train"]
    cells = aggregate(train, "tflops")
    memory = measured(train).groupby(["provider", "variant", "seqlen_k"])["peak_mem_bytes"].max()
    entry = datasheet_entry(main_gpu(frames), hardware)
    datasheet = float(entry["dense_fp16_tflops"]) if entry else None  # dense bf16 equals fp16 on Hopper
    ceiling = interleaved_ceiling(frames["training"], "bf16")
    ceiling = ceiling["tflops"] if ceiling else None
    rows = []
    for cell in cells.sort_values(["variant", "seqlen_k"], kind="stable").itertuples():
        tokens = int(cell.batch) * int(cell.seqlen_k)
        tflops = None if pd.isna(cell.tflops) else float(cell.tflops)
        tokens_per_s = tflops * 1e12 / flops_per_token if tflops and (
            flops_per_token := _training_flops_per_token(frame, cell)) else None
        peak = memory.get((cell.provider, cell.variant, cell.seqlen_k))
        rows.append({"model": cell.variant, "context": int(cell.seqlen_k), "provider": PROVIDERS.get(cell.provider,
                     (cell.provider,))[0], "batch": int(cell.batch), "tokens": tokens, "status": cell.status,
                     "tflops": tflops, "tokens_per_s": tokens_per_s,
                     "mfu_datasheet": 100 * tflops / datasheet if tflops and datasheet else None,
                     "mfu_ceiling": 100 * tflops / ceiling if tflops and ceiling else None,
                     "peak_gib": None if peak is None or pd.isna(peak) else float(peak) / 2**30})
    return {"measured": True, "rows": rows, "flops": TRAINING_FLOPS, "datasheet_tflops": datasheet,
            "ceiling_tflops": ceiling}


def _training_flops_per_token(frame: pd.DataFrame, cell) -> float | None:
    """A training cell's model FLOPs per token, from its rows: TFLOP/s x step time / tokens of the step."""
    rows = measured(frame[(frame["provider"] == cell.provider) & (frame["variant"] == cell.variant)
                          & (frame["seqlen_k"] == cell.seqlen_k)]).dropna(subset=["tflops", "ms"])
    if rows.empty:
        return None
    row = rows.iloc[0]
    return float(row["tflops"]) * 1e12 * float(row["ms"]) * 1e-3 / (int(row["batch"]) * int(row["seqlen_k"]))


FEATURES_FLOPS = ("TFLOP/s of the features ablation count the score entries each mask leaves visible "
                  "(experiments/flops.py, visible_pairs): forward 4 x heads x visible entries x head dim, 2.5x for the "
                  "backward; a sliding window of w keys about N x w, causal N (N + 1) / 2, a variable-length batch "
                  "the sum over its sequences, for the packed, the padded and FlexAttention's arm alike (so the padded "
                  "arm's TFLOP/s are useful work: the pad it computes is not counted). Speedups are ratios of time.")


def features(frames: dict[str, pd.DataFrame]) -> dict:
    """The features ablation's comparisons as a table (median speedup of ours over each peer per pass), or
    measured=False when the run holds no features.csv."""
    from analysis import features as feature_comparisons

    if "features" not in frames:
        return {"measured": False, "rows": [], "flops": FEATURES_FLOPS, "lengths": ""}
    frame = frames["features"]
    notes = sorted(set(frame.loc[frame["variant"] == "varlen", "note"]) - {""})
    return {"measured": True, "rows": feature_comparisons.table(frame), "flops": FEATURES_FLOPS,
            "lengths": notes[0] if notes else ""}


def _spread(values: pd.Series, scale: float = 1.0, digits: int = 2) -> str:
    """A median with its min-max in brackets ("1.70 (1.65-1.75)"); the median alone when they print alike."""
    values = values.dropna() * scale
    if values.empty:
        return "-"
    text = [f"{value:.{digits}f}" for value in (values.median(), values.min(), values.max())]
    return text[0] if text[1] == text[2] else f"{text[0]} ({text[1]}-{text[2]})"


def _between(values, fmt: str) -> str:
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return low if low == high else f"{low}-{high}"


def jit(frame: pd.DataFrame | None) -> dict:
    """The jit ablation (results/jit.csv, experiments/jit.py) as a table, one line per head dim and mask: the first
    forward's and first backward's seconds in a fresh process with an empty and with a filled Triton cache, and the
    second forward+backward's milliseconds, each a median over repetitions with their min-max; and the figures
    that the report's sentence quotes. measured=False when the run holds no jit.csv."""
    if frame is None or frame.empty:
        return {"measured": False, "rows": []}
    ok = frame[frame["status"] == "ok"]
    found = {"measured": True, "rows": [], "failed": int((frame["status"] != "ok").sum()),
             "processes": len(frame), "gpu": _values(frame["gpu"]), "source": _values(frame["source"]),
             "dtype": _values(frame["dtype"]), "batch": _values(frame["batch"]), "heads": _values(frame["heads"]),
             "seqlen": _values(frame["seqlen"]), "concurrent": _values(frame["concurrent"]),
             "repetitions": int(frame["repetition"].max()) + 1 if frame["repetition"].notna().any() else 0,
             "empty_total": None, "filled_total": None, "saved": None, "second_ms": None}
    totals = []  # per head dim and mask with both caches measured: (empty, filled) medians of first fwd + bwd
    second = []
    for (head_dim, causal), group in ok.groupby(["head_dim", "causal"], sort=True):
        by_cache = {cache: group[group["cache"] == cache] for cache in ("empty", "filled")}
        line = {"head_dim": int(head_dim), "mask": "causal" if causal else "full",
                "second_ms": _spread(group["second_fwd_bwd_s"], 1e3, 1)}
        for cache, rows in by_cache.items():
            line[f"{cache}_fwd"] = _spread(rows["first_fwd_s"])
            line[f"{cache}_bwd"] = _spread(rows["first_bwd_s"])
        if all(len(rows) for rows in by_cache.values()):
            totals.append(tuple(float((by_cache[cache]["first_fwd_s"] + by_cache[cache]["first_bwd_s"]).median())
                                for cache in ("empty", "filled")))
        if len(group):
            second.append(float(group["second_fwd_bwd_s"].median()) * 1e3)
        found["rows"].append(line)
    if totals:
        found["empty_total"] = _between([empty for empty, _ in totals], "{:.1f}")
        found["filled_total"] = _between([filled for _, filled in totals], "{:.1f}")
        found["saved"] = _between([100 * (1 - filled / empty) for empty, filled in totals], "{:.0f}")
    if second:
        found["second_ms"] = _between(second, "{:.1f}")
    return found


# the hopper ablation's arm that runs each pass on a Hopper kernel, and the kernel in words
HOPPER_KERNELS = {"fwd": ("hopper", "the Hopper forward (kernels/_hopper.py)"),
                  "bwd": ("hopper_bwd", "the one-pass Hopper backward (kernels/_hopper_bwd.py)")}
SPEED_FIGURES = ("speed_fwd", "speed_bwd", "speed_fwd_bwd")


def _tile_keys(rows: pd.DataFrame) -> pd.Series:
    return rows[["head_dim"] + TILE_COLUMNS].astype(int).apply(tuple, axis=1)


def engine_kernels(frames: dict[str, pd.DataFrame]) -> str:
    """Which kernels ours ran in speed.csv, in words, read from the rows: a row of ours whose tile columns hold
    the tiles that the hopper ablation's Hopper arm (HOPPER_KERNELS) recorded in the same pass at the same head
    dim, and not those of its portable arm, ran that Hopper kernel; the rest ran the portable kernels. "" when
    the rows cannot tell (no hopper.csv, or no tile columns)."""
    if "speed" not in frames or "hopper" not in frames:
        return ""
    speed, hopper = (measured(attention_rows(frames[name])) for name in ("speed", "hopper"))
    speed = speed[speed["provider"] == "ours"].dropna(subset=TILE_COLUMNS)
    hopper = hopper[hopper["provider"] == "ours"].dropna(subset=TILE_COLUMNS)
    if speed.empty or hopper.empty:
        return ""
    ran = []
    for mode, (variant, kernel) in HOPPER_KERNELS.items():
        arms = {arm: set(_tile_keys(hopper[(hopper["variant"] == arm) & (hopper["mode"] == mode)]))
                for arm in (variant, "portable")}
        rows = speed[speed["mode"] == mode]
        if rows.empty:
            continue
        rows = rows.assign(on=_tile_keys(rows).isin(arms[variant] - arms["portable"]).to_numpy())
        where = []
        for head_dim, group in rows.groupby("head_dim", sort=True):
            by_length = group.groupby("seqlen_k")["on"].agg(["all", "any"])
            if not by_length["any"].any():
                continue
            on = sorted(int(n) for n in by_length.index[by_length["all"]])
            if len(on) == len(by_length):
                where.append((int(head_dim), ""))
            elif on and not by_length["any"][by_length.index < on[0]].any() and by_length["all"][by_length.index >= on[0]].all():
                where.append((int(head_dim), f" from sequence length {on[0]}"))
            else:
                where.append((int(head_dim), " at some shapes"))
        if where and all(text == "" for _, text in where):
            ran.append(f"{kernel} at {head_dims_words(d for d, _ in where)}")
        elif where:
            ran.append(f"{kernel} " + and_join(f"at head dim {d}{text}" for d, text in where))
    how = ("which kernel a row ran is read from its tile columns, set beside the tiles of the hopper ablation's "
           "Hopper and portable arms")
    if not ran:
        return f"In these rows ours ran the portable FlashAttention-2 kernels throughout ({how})."
    return f"In these rows ours ran {'; '.join(ran)}; and the portable FlashAttention-2 kernels elsewhere ({how})."


def figures(figures_dir: str | Path, frames: dict[str, pd.DataFrame] | None = None) -> dict:
    """Each figure's caption and files; the speed figures' captions end with the kernels ours ran in their rows
    (engine_kernels)."""
    kernels = engine_kernels(frames or {})
    return {name: {"caption": caption(name) + (f" {kernels}" if kernels and name in SPEED_FIGURES else ""),
                   "files": {fmt: path.name for fmt, path in figure_paths(name, figures_dir).items()}}
            for name in FIGURES}


def collect(frames: dict[str, pd.DataFrame], hardware: dict, figures_dir: str | Path,
            jit_rows: pd.DataFrame | None = None, loss_rows: pd.DataFrame | None = None) -> dict:
    """Everything the report reads besides the verdicts; jit_rows: results/jit.csv (load.read_jit), loss_rows:
    results/training_loss.csv (load.read_loss), None without them."""
    side = side_files(jit_rows, loss_rows)
    setup_facts, method_facts = setup(frames, hardware, side), method(frames)
    jit_facts = jit(jit_rows)
    return {"setup": setup_facts, "method": method_facts, "method_text": method_text(setup_facts, method_facts),
            "threats": threats_text(frames, setup_facts, method_facts), "provenance": provenance(frames, side),
            "speed_table": speed_table(frames),
            "best_tiles": best_tiles(frames), "fa1_steps": fa1_steps(frames), "failures": failures(frames),
            "training": training(frames, hardware), "features": features(frames),
            "not_measured": not_measured(frames) + ([] if jit_facts["measured"] else ["jit"]),
            "decode": decode_facts(frames), "fp8": fp8_facts(frames), "jit": jit_facts,
            "figures": figures(figures_dir, frames)}


def loss_agreement(loss: pd.DataFrame) -> dict | None:
    """The loss-agreement run in numbers: the largest step-wise |ours - reference| from the shared seed,
    against the largest |reference seed 0 - reference seed 1| (the seed spread); None without the run."""
    if loss.empty or "ours" not in set(loss["provider"]):
        return None
    ours = loss[loss["provider"] == "ours"]
    reference = loss[loss["provider"] != "ours"]
    shared = int(ours["seed"].iloc[0])
    name = str(reference["provider"].iloc[0])
    curves = reference.pivot_table(index="step", columns="seed", values="loss")
    other = [seed for seed in curves.columns if seed != shared]
    if shared not in curves.columns or not other:
        return None
    ours_curve = ours.set_index("step")["loss"]
    return {"reference": PROVIDERS.get(name, (name,))[0], "steps": int(len(ours_curve)),
            "max_abs_diff": float((ours_curve - curves[shared]).abs().max()),
            "seed_spread": float((curves[shared] - curves[other[0]]).abs().max()),
            "final_ours": float(ours_curve.iloc[-1]), "final_reference": float(curves[shared].iloc[-1])}


def main(results_dir: str, figures_dir: str, out_json: str) -> None:
    loss = read_loss(results_dir)
    facts = collect(read_results(results_dir), read_hardware(), figures_dir, read_jit(results_dir), loss)
    facts["training"]["loss"] = loss_agreement(loss) if facts["training"]["measured"] else None
    Path(out_json).parent.mkdir(parents=True, exist_ok=True)
    Path(out_json).write_text(json.dumps(facts, indent=2, default=to_json) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
