"""Compute each claim's metric from the results and its verdict from the rules in claims.yaml.

A metric is a function registered in METRICS: it takes the results frames (and the hardware data) plus
the claim's `args` and returns named values; the claim's `holds` and `partly` expressions are evaluated
over those values by a small expression evaluator (comparisons, and/or/not, arithmetic, min/max/abs;
an unknown value makes a comparison unknown instead of false). Verdicts: not comparable (a claim's
`not_comparable` expression, evaluated first: the question cannot be asked of these results), holds,
partly, does not hold, no data. Nothing here is typed from the paper: the thresholds live in claims.yaml.
Timed values are cells (medians over repetitions) from analysis/cells.py, which also keeps host-bound
and noisy cells out of every verdict.

    python -m analysis.claims RESULTS_DIR OUT_JSON OUT_CSV
"""
from __future__ import annotations

import ast
import json
import math
import operator
import re
import string
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.catalog import FIGURES
from analysis.cells import (PAIR_KEYS, aggregate, describe_exclusions, eligible, exclusion_counts, matmul_ceiling,
                            paired, read_settings, read_yaml, select)
from analysis.load import CELL_KEYS, attention_rows, measured, read_results
from analysis.peaks import datasheet_entry, read_hardware

CLAIMS_FILE = Path(__file__).with_name("claims.yaml")
HOLDS, PARTLY, DOES_NOT_HOLD, NO_DATA = "holds", "partly", "does not hold", "no data"
NOT_COMPARABLE = "not comparable"
VERDICTS = (HOLDS, PARTLY, DOES_NOT_HOLD, NOT_COMPARABLE, NO_DATA)
ERROR_QUANTITIES = {"err_o": "O", "err_lse": "LSE", "err_dq": "dQ", "err_dk": "dK", "err_dv": "dV"}


def read_claims(path: str | Path = CLAIMS_FILE) -> list[dict]:
    return read_yaml(path)["claims"]


# ---------------------------------------------------------------- rule expressions

_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
            ast.Eq: operator.eq, ast.NotEq: operator.ne}
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_FUNCTIONS = {"min": min, "max": max, "abs": abs}


def evaluate_rule(expression: str, values: dict):
    """Evaluate a rule like "min >= 3 and median < 10" over `values`; None where a value is unknown."""
    return _evaluate(ast.parse(expression, mode="eval").body, values)


def _evaluate(node, values):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in values:
            raise KeyError(f"rule uses {node.id!r}, which the metric does not provide ({sorted(values)})")
        value = values[node.id]
        return None if value is None or (isinstance(value, float) and math.isnan(value)) else value
    if isinstance(node, ast.BoolOp):
        results = [_evaluate(operand, values) for operand in node.values]
        decisive = isinstance(node.op, ast.Or)  # True decides an `or`, False decides an `and`
        if any(result is decisive for result in results):
            return decisive
        return None if any(result is None for result in results) else not decisive
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
        operand = _evaluate(node.operand, values)
        if operand is None:
            return None
        return (not operand) if isinstance(node.op, ast.Not) else -operand
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _evaluate(node.left, values), _evaluate(node.right, values)
        return None if left is None or right is None else _ARITHMETIC[type(node.op)](left, right)
    if isinstance(node, ast.Compare):
        operands = [_evaluate(node.left, values)] + [_evaluate(item, values) for item in node.comparators]
        if any(operand is None for operand in operands):
            return None
        return all(_COMPARE[type(op)](left, right)
                   for op, left, right in zip(node.ops, operands, operands[1:]))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
        arguments = [_evaluate(argument, values) for argument in node.args]
        return None if any(a is None for a in arguments) else _FUNCTIONS[node.func.id](*arguments)
    raise ValueError(f"unsupported element in rule: {ast.unparse(node)}")


# ---------------------------------------------------------------- metrics

METRICS = {}


def metric(function):
    METRICS[function.__name__] = function
    return function


def paired_ratio(frame: pd.DataFrame, baseline: dict, candidate: dict, value: str = "ms",
                 keys: list[str] = PAIR_KEYS) -> pd.DataFrame:
    """Baseline over candidate cell medians of `value`, one row per shape where both arms have an eligible cell."""
    return paired(frame, baseline, candidate, value, keys)[0]


def and_join(items) -> str:
    """Items in words: "96", "96 and 192", "96, 192 and 256"."""
    items = [str(item) for item in items]
    return " and ".join(items) if len(items) < 3 else ", ".join(items[:-1]) + " and " + items[-1]


def head_dims_words(head_dims) -> str:
    """"head dim 96" for one, "head dims 96, 192 and 256" for several."""
    head_dims = [int(d) for d in head_dims]
    return f"head dim{'s' if len(head_dims) > 1 else ''} {and_join(head_dims)}"


SHAPE_LABELS = {"seqlen_k": "seqlen", "head_dim": "head_dim", "causal": "causal"}


def summarise_ratios(pairs: pd.DataFrame, where: dict[str, str] = SHAPE_LABELS) -> dict:
    """n, min, median, max of pairs.ratio, the median at the longest sequence, and where the extremes are
    (as min_at_<label>, max_at_<label> for each column: label in `where` that the pairs have)."""
    if pairs.empty:
        return {"n": 0, "min": None, "median": None, "max": None, "at_longest": None, "longest_seqlen": None,
                "below_one": 0, **{f"{end}_at_{label}": None for end in ("min", "max") for label in where.values()}}
    longest = pairs["seqlen_k"].max()
    summary = {"n": len(pairs), "min": float(pairs["ratio"].min()), "median": float(pairs["ratio"].median()),
               "max": float(pairs["ratio"].max()), "longest_seqlen": int(longest),
               "at_longest": float(pairs.loc[pairs["seqlen_k"] == longest, "ratio"].median()),
               "below_one": int((pairs["ratio"] < 1).sum())}
    for end, position in (("min", pairs["ratio"].idxmin()), ("max", pairs["ratio"].idxmax())):
        for column, label in where.items():
            item = pairs.loc[position, column] if column in pairs else None
            summary[f"{end}_at_{label}"] = item.item() if hasattr(item, "item") else item
    return summary


def _status_counts(frame: pd.DataFrame, arm: dict) -> str:
    counts = select(attention_rows(frame), arm)["status"].value_counts()
    return ", ".join(f"{count} {status} rows" for status, count in counts.items()) or "no rows"


def _in(frame: pd.DataFrame, dtype: str | None = None, mode: str | None = None) -> pd.DataFrame:
    """The attention rows of `frame` in `dtype` and `mode` (None: any)."""
    frame = attention_rows(frame)
    if dtype is not None:
        frame = frame[frame["dtype"] == dtype]
    return frame[frame["mode"] == mode] if mode is not None else frame


def _compare(frame, baseline, candidate, value, keys, settings) -> dict:
    """Ratios of one pair of arms, summarised, with the cells left out in words."""
    pairs, excluded = paired(frame, baseline, candidate, value, keys)
    summary = summarise_ratios(pairs)
    summary.update(excluded=describe_exclusions(excluded, settings), **exclusion_counts(excluded))
    return summary | {"pairs": pairs}


@metric
def speedup(frames, hardware, *, experiment, baseline, candidate, modes, value="ms", dtype="fp16", pair_without=(),
            also=None, head_dims=None):
    """How many times faster the candidate arm is than the baseline arm, in the first of `modes` with data.

    Cells are paired on the shape and mode less the columns in `pair_without` (causal, to set a causal arm
    against a non-causal one). `also` names further baselines compared with the same candidate in that mode,
    reported as <name>_min, <name>_median, ... and <name>_on_shared (median over the main comparison's shapes).
    `head_dims` restricts the verdict to the paper's head dims; the same comparison at the other head dims
    measured is reported beside it as beyond_n, beyond_min, beyond_median, beyond_max ("" when none).
    """
    settings = read_settings()
    keys = [key for key in PAIR_KEYS if key not in pair_without]
    frame = frames[experiment]

    def first_mode_with_pairs(rows):
        for mode in modes:
            summary = _compare(_in(rows, dtype, mode), baseline, candidate, value, keys, settings)
            if summary["n"]:
                break
        return mode, summary

    beyond = {"beyond_n": 0, "beyond_min": None, "beyond_median": None, "beyond_max": None, "beyond_head_dims": "",
              "beyond": "no other head dim was measured with both arms"}
    if head_dims is not None:
        # attention rows of other head dims go beside the verdict; the ceilings (no head dim) stay
        in_grid = frame["head_dim"].isin(list(head_dims)).fillna(False).to_numpy()
        has_head_dim = frame["head_dim"].notna().to_numpy()
        others, frame = frame[~in_grid & has_head_dim], frame[in_grid | ~has_head_dim]
        _, other = first_mode_with_pairs(others)
        if other["n"]:
            dims = ", ".join(str(int(d)) for d in sorted(others["head_dim"].unique()))
            beyond.update(beyond_n=other["n"], beyond_min=other["min"], beyond_median=other["median"],
                          beyond_max=other["max"], beyond_head_dims=dims,
                          beyond=f"at {head_dims_words(sorted(others['head_dim'].unique()))}, "
                                 f"{other['min']:.2f}-{other['max']:.2f}x over {other['n']} shapes")
    mode, summary = first_mode_with_pairs(frame)
    pairs = summary.pop("pairs")
    in_mode = _in(frame, dtype, mode)
    failed = aggregate(select(in_mode, baseline), value)
    failed = failed[failed["status"] != "ok"]
    ok_candidate = eligible(aggregate(select(in_mode, candidate), value))
    summary["baseline_failed"] = len(failed.merge(ok_candidate[keys].drop_duplicates(), on=keys))
    summary["mode"] = mode
    summary["baseline_rows"] = _status_counts(frame[frame["dtype"] == dtype], baseline)
    for name, arm in (also or {}).items():
        other = _compare(in_mode, arm, candidate, value, keys, settings)
        shared = other["pairs"].merge(pairs[keys], on=keys) if not pairs.empty else other["pairs"].iloc[:0]
        summary.update({f"{name}_{key}": item for key, item in other.items()
                        if key in ("n", "min", "median", "max", "at_longest")})
        summary[f"{name}_on_shared"] = float(shared["ratio"].median()) if not shared.empty else None
    summary.update(beyond)
    if not summary["n"]:
        summary["missing"] = (f"no {dtype} shape in {experiment}.csv with eligible cells of both {baseline} "
                              f"({_status_counts(frame, baseline)}) and {candidate} "
                              f"({_status_counts(frame, candidate)})")
    return summary


def _within(frame: pd.DataFrame, head_dims=None, min_seqlen=None, seqlens=None) -> pd.DataFrame:
    """Attention rows restricted to `head_dims`, to sequences of at least `min_seqlen` keys, or to `seqlens`."""
    keep = pd.Series(True, index=frame.index)
    if head_dims is not None:
        keep &= frame["head_dim"].isin(list(head_dims))
    if min_seqlen is not None:
        keep &= frame["seqlen_k"] >= min_seqlen
    if seqlens is not None:
        keep &= frame["seqlen_k"].isin(list(seqlens))
    return frame[keep]


@metric
def speedup_by_mode(frames, hardware, *, experiment, baseline, candidate, modes, dtype="fp16", arms=None,
                    verdict_mode="fwd_bwd", head_dims=None, min_seqlen=None, pair_without=()):
    """The speedup of candidate over baseline in each of `modes` separately, as <mode>_min, <mode>_median, ...;
    n is the verdict mode's. `arms` ({variant: description}) are set against the candidate one at a time:
    how much faster the candidate is than each, per mode, in words (`arms`). `head_dims` and `min_seqlen`
    restrict the shapes compared. Cells are paired on the shape and mode less the columns in `pair_without`
    (dtype, to set an fp8 arm against an fp16 one: then `dtype` is null and the arms name their dtypes)."""
    settings = read_settings()
    frame = frames[experiment]
    keys = [key for key in PAIR_KEYS if key not in pair_without]
    if head_dims is not None or min_seqlen is not None:
        frame = _within(attention_rows(frame), head_dims, min_seqlen)
    values, left_out = {}, []
    for mode in modes:
        pairs, excluded = paired(_in(frame, dtype, mode), baseline, candidate, keys=keys)
        left_out.append(excluded)
        summary = summarise_ratios(pairs)
        values.update({f"{mode}_{key}": item for key, item in summary.items()})
    excluded = pd.concat(left_out, ignore_index=True)
    values.update(n=values[f"{verdict_mode}_n"], excluded=describe_exclusions(excluded, settings),
                  **exclusion_counts(excluded))
    words = []
    for variant, description in (arms or {}).items():
        per_mode, arm_left_out = [], []
        for mode in modes:
            pairs, arm_excluded = paired(_in(frame, dtype, mode), {"variant": variant}, candidate)
            arm_left_out.append(arm_excluded)
            if not pairs.empty:
                per_mode.append(f"{MODE_WORDS[mode]} {_medians_by_head_dim(pairs)}")
        if per_mode:
            # the step arm's own cells that its pairs left out (those the verdict's {excluded} names are not repeated)
            arm_excluded = pd.concat(arm_left_out, ignore_index=True)
            arm_excluded = arm_excluded[arm_excluded["excluded"] != ""].merge(
                excluded[excluded["excluded"] != ""][CELL_KEYS].drop_duplicates(), on=CELL_KEYS, how="left",
                indicator=True)
            arm_excluded = arm_excluded[arm_excluded["_merge"] == "left_only"]
            left = (f" (its own cells left out: {describe_exclusions(arm_excluded, settings, why=False)})"
                    if not arm_excluded.empty else "")
            words.append(f"{description} ({variant}): " + ", ".join(per_mode) + left)
    values["arms"] = "; ".join(words) or "none measured"
    if not values["n"]:
        values["missing"] = (f"no {dtype + ' ' if dtype else ''}{verdict_mode} shape in {experiment}.csv with "
                             "eligible cells of both "
                             f"{baseline} ({_status_counts(frame, baseline)}) and {candidate} "
                             f"({_status_counts(frame, candidate)})")
    return values


MODE_WORDS = {"fwd": "forward", "bwd": "backward", "fwd_bwd": "forward+backward"}


def _medians_by_head_dim(pairs: pd.DataFrame) -> str:
    """The median ratio of `pairs`, one per head dim where they span several ("1.02x at head dim 64 and 1.32x
    at head dim 128"): a median over head dims that gain differently would land on either side."""
    head_dims = sorted(pairs["head_dim"].dropna().unique())
    if len(head_dims) < 2:
        return f"{pairs['ratio'].median():.2f}x"
    return " and ".join(f"{pairs.loc[pairs['head_dim'] == d, 'ratio'].median():.2f}x at head dim {int(d)}"
                        for d in head_dims)


@metric
def host_time_ratio(frames, hardware, *, experiment, baseline, candidate, modes, seqlens, dtype="fp16"):
    """Host time per call (the rows' host_ms: the host's own time from the call to its return, medians over
    repetitions) of candidate over baseline at `seqlens`, per mode: <mode>_n, _min, _median, _max and
    <mode>_worst_at. Host-bound cells are the point here, so none is left out."""
    frame = _within(attention_rows(frames[experiment]), seqlens=seqlens)
    values = {}
    for mode in modes:
        pairs, _ = paired(_in(frame, dtype, mode), baseline, candidate, value="host_ms")
        pairs = pairs.assign(ratio=1.0 / pairs["ratio"])  # candidate host time over baseline's
        summary = summarise_ratios(pairs)
        values.update({f"{mode}_{key}": summary[key] for key in ("n", "min", "median", "max")})
        values[f"{mode}_worst_at"] = ("none" if pairs.empty else f"head dim {int(summary['max_at_head_dim'])}, "
                                      f"{'causal' if summary['max_at_causal'] else 'full'}")
    values["n"] = sum(values[f"{mode}_n"] for mode in modes)
    if not values["n"]:
        values["missing"] = (f"no {dtype} cell in {experiment}.csv at sequence lengths {list(seqlens)} with host "
                             f"times of both {baseline} and {candidate}")
    return values


def _describe_shape(row) -> str:
    return (f"n = {row['seqlen_k']}, d = {row['head_dim']}, {'causal' if row['causal'] else 'non-causal'}, "
            f"{row['dtype']}")


def _share(part, whole):
    return part / whole if part is not None and whole else None


def best_cell(frame: pd.DataFrame, provider: str, mode: str, dtype: str):
    """The eligible cell of `provider` with the highest median TFLOP/s in `mode` and `dtype`, with the cells
    left out (None when there is none)."""
    cells = aggregate(select(_in(frame, dtype, mode), {"provider": provider}), "tflops")
    ok = eligible(cells)
    return (ok.loc[ok["tflops"].idxmax()] if not ok.empty else None), cells[cells["excluded"] != ""]


@metric
def peak_fraction(frames, hardware, *, mode, dtype="fp16", provider="ours"):
    """Best TFLOP/s of `provider` in `mode` as a share of the datasheet peak and of the matmul ceiling measured
    interleaved with the same run (speed.csv's torch_matmul rows of `dtype`; ceiling.csv as a fallback): of its
    median over repetitions (of_ceiling) and of its fastest repetition (of_fastest_ceiling). A repetition that
    ran while the GPU had clocked down lowers the median, so a verdict against the ceiling rests on the fastest."""
    best, excluded = best_cell(frames["speed"], provider, mode, dtype)
    ceiling = matmul_ceiling(frames, "speed", dtype)
    ceiling_tflops = ceiling["tflops"] if ceiling else None
    fastest_ceiling = ceiling["max"] if ceiling else None
    values = {"n": 0 if best is None else 1, "excluded": describe_exclusions(excluded), "dtype": dtype,
              "ceiling_tflops": ceiling_tflops, "fastest_ceiling_tflops": fastest_ceiling,
              "ceiling_repetitions": ceiling["repetitions"] if ceiling else 0,
              "ceiling_from": ceiling["experiment"] if ceiling else None, **exclusion_counts(excluded)}
    if best is None:
        return values | {"best_tflops": None, "best_at": None, "datasheet_tflops": None, "of_datasheet": None,
                         "of_ceiling": None, "of_fastest_ceiling": None, "ceiling_of_datasheet": None, "repetitions": 0,
                         "missing": f"no eligible {provider} {dtype} {mode} cell in speed.csv "
                                    f"({_status_counts(frames['speed'], {'provider': provider})})"}
    entry = datasheet_entry(best["gpu"], hardware)
    datasheet = float(entry["dense_fp16_tflops"]) if entry else None
    tflops = float(best["tflops"])
    return values | {"best_tflops": tflops, "best_at": _describe_shape(best), "repetitions": int(best["repetitions"]),
                     "datasheet_tflops": datasheet, "of_datasheet": _share(tflops, datasheet),
                     "of_ceiling": _share(tflops, ceiling_tflops), "of_fastest_ceiling": _share(tflops, fastest_ceiling),
                     "ceiling_of_datasheet": _share(ceiling_tflops, datasheet)}


@metric
def utilisation(frames, hardware, *, provider, modes, dtype="fp16"):
    """The best TFLOP/s of `provider` in each of `modes` and its share of the datasheet peak, as
    <mode>_tflops, <mode>_of_datasheet, <mode>_at; `hopper` says whether the GPU is a Hopper."""
    values, left_out = {"n": 0, "gpu": None, "hopper": None, "datasheet_tflops": None}, []
    for mode in modes:
        best, excluded = best_cell(frames["speed"], provider, mode, dtype)
        left_out.append(excluded)
        values.update({f"{mode}_tflops": None, f"{mode}_of_datasheet": None, f"{mode}_at": None})
        if best is None:
            continue
        entry = datasheet_entry(best["gpu"], hardware)
        datasheet = float(entry["dense_fp16_tflops"]) if entry else None
        values.update({f"{mode}_tflops": float(best["tflops"]), f"{mode}_at": _describe_shape(best),
                       f"{mode}_of_datasheet": _share(float(best["tflops"]), datasheet)},
                      n=values["n"] + 1, gpu=best["gpu"], datasheet_tflops=datasheet,
                      hopper=bool(entry and entry.get("architecture") == "hopper"))
    excluded = pd.concat(left_out, ignore_index=True)
    values.update(excluded=describe_exclusions(excluded), **exclusion_counts(excluded))
    if not values["n"]:
        values["missing"] = (f"no eligible {provider} {dtype} cell in speed.csv "
                             f"({_status_counts(frames['speed'], {'provider': provider})})")
    return values


def quadratic_fit(seqlens, values) -> tuple[float, float, float]:
    """a, b, c of a + b·N + c·N² fitted by least squares on relative residuals (each point weighted by
    1/value, so that short and long sequences count alike); N in units of the longest N."""
    n = np.asarray(seqlens, dtype=float)
    y = np.asarray(values, dtype=float)
    scale = n.max()
    x = n / scale
    weights = 1 / y
    design = np.stack([np.ones_like(x), x, x**2], axis=1) * weights[:, None]
    a, b, c = np.linalg.lstsq(design, y * weights, rcond=None)[0]
    return float(a), float(b / scale), float(c / scale**2)


def quadratic_share(fit: tuple[float, float, float], seqlen: float) -> float:
    """The share of the fitted value at `seqlen` that the N² term makes up (0 when c <= 0)."""
    a, b, c = fit
    total = a + b * seqlen + c * seqlen**2
    return max(0.0, c * seqlen**2 / total) if total > 0 else None


def memory_fits(frame: pd.DataFrame, value: str = "attn_mem_bytes") -> pd.DataFrame:
    """One fit of a + b·N + c·N² per provider, shape (variant), pass and mask, over the cells' median `value`."""
    cells = aggregate(_in(frame), value)
    cells = cells[cells["status"] == "ok"].dropna(subset=[value])
    fits = []
    for (provider, variant, mode, causal), group in cells.groupby(["provider", "variant", "mode", "causal"]):
        if group["seqlen_k"].nunique() < 3:
            continue
        fit = quadratic_fit(group["seqlen_k"], group[value])
        longest = int(group["seqlen_k"].max())
        fits.append({"provider": provider, "variant": variant, "mode": mode, "causal": int(causal), "value": value,
                     "a": fit[0], "b": fit[1], "c": fit[2], "longest": longest, "points": len(group),
                     "quadratic_share": quadratic_share(fit, longest)})
    return pd.DataFrame(fits, columns=["provider", "variant", "mode", "causal", "value", "a", "b", "c", "longest",
                                       "points", "quadratic_share"])


def _shape_text(rows: pd.DataFrame) -> str:
    if rows.empty:
        return "not measured"
    row = rows.iloc[0]
    return f"batch {row['batch']}, {row['heads']} heads, head dim {row['head_dim']}, {row['dtype']}"


@metric
def memory_fit(frames, hardware, *, paper_shape, our_shape, mode, savings_at, provider="ours", baseline="standard"):
    """Whether attention's own memory is linear in N (the N² term's share of a fitted a + b·N + c·N² at the
    longest N, worst over ours' fits), and the saving against the baseline (baseline bytes / ours) in total
    memory and in attention's own, on the paper's shape at `savings_at`, non-causal, in `mode`; and on our
    shape at the longest N where the baseline ran."""
    frame = frames["seqlen"]
    fits = memory_fits(frame)
    ours, theirs = fits[fits["provider"] == provider], fits[fits["provider"] == baseline]
    values = {"n": len(ours), "fits": len(ours), "mode": mode,
              "quadratic_share": float(ours["quadratic_share"].max()) if not ours.empty else None,
              "baseline_quadratic_share": float(theirs["quadratic_share"].min()) if not theirs.empty else None}
    total_fits = memory_fits(frame, "peak_mem_bytes")
    total_ours = total_fits[total_fits["provider"] == provider]
    values["quadratic_share_total"] = float(total_ours["quadratic_share"].max()) if not total_ours.empty else None
    in_mode = _in(frame, mode=mode)
    in_mode = in_mode[in_mode["causal"] == 0]
    for shape, prefix in ((paper_shape, ""), (our_shape, "long_")):
        rows = in_mode[in_mode["variant"] == shape]
        values[f"{'paper' if not prefix else 'our'}_shape_text"] = _shape_text(rows) + f", {mode}, non-causal"
        for column, name in (("peak_mem_bytes", "total"), ("attn_mem_bytes", "own")):
            pairs = paired_ratio(rows, {"provider": baseline}, {"provider": provider}, column)
            if prefix:
                at = int(pairs["seqlen_k"].max()) if not pairs.empty else None
                values["long_saving_at"] = at
                values[f"long_saving_{name}"] = (float(pairs.loc[pairs["seqlen_k"] == at, "ratio"].iloc[0])
                                                 if at else None)
                continue
            for seqlen in savings_at:
                found = pairs[pairs["seqlen_k"] == seqlen]["ratio"]
                values[f"saving_{name}_{seqlen // 1024}k"] = float(found.iloc[0]) if not found.empty else None
        if prefix:
            oom = rows[(rows["provider"] == baseline) & (rows["status"] == "oom")]["seqlen_k"]
            values["long_baseline_oom_from"] = f"N = {int(oom.min())}" if not oom.empty else "never"
    if ours.empty:
        values["missing"] = (f"fewer than three measured {provider} lengths per shape in seqlen.csv "
                             f"({_status_counts(frame, {'provider': provider})})")
    return values


HOST_WORDS = {"cuda": "the GPU", "cpu-interpreter": "the CPU, in Triton's interpreter (small shapes)"}


@metric
def error_ratio(frames, hardware, *, baseline, candidate):
    """Candidate's error over the baseline's, per output and gradient, both against the float64 reference."""
    frame = frames["accuracy"]
    long = frame.melt(id_vars=PAIR_KEYS + ["provider", "status"], value_vars=list(ERROR_QUANTITIES),
                      var_name="quantity", value_name="error")
    long["quantity"] = long["quantity"].map(ERROR_QUANTITIES)
    keys = PAIR_KEYS + ["quantity"]
    arms = {}
    for name, provider in (("candidate", candidate), ("baseline", baseline)):
        rows = measured(long[long["provider"] == provider]).dropna(subset=["error"])
        arms[name] = rows.groupby(keys, dropna=False)["error"].median()
    pairs = pd.concat(arms, axis=1).dropna()
    pairs["ratio"] = pairs["candidate"] / pairs["baseline"]
    pairs = pairs.reset_index()
    summary = summarise_ratios(pairs, where={"quantity": "quantity", "dtype": "dtype", "seqlen_k": "seqlen"})
    ran = measured(frame[frame["provider"].isin([baseline, candidate])])
    hosts = []
    for (kind, gpu), _ in ran.groupby(["host_kind", "gpu"], dropna=False):
        words = HOST_WORDS.get(kind, kind or "an unrecorded host")
        hosts.append(f"{words} ({gpu})" if kind == "cuda" and gpu else words)
    summary["hosts"] = " and ".join(hosts) or "no host"
    if pairs.empty:
        summary["missing"] = (f"no shape in accuracy.csv with errors of both {candidate} "
                              f"({_status_counts(frame, {'provider': candidate})}) and {baseline} "
                              f"({_status_counts(frame, {'provider': baseline})})")
    return summary


NOT_MEASURED = "{}: not measured in the archived run yet"


def _model_context(model: str, seqlen) -> str:
    return f"{model} at {int(seqlen) // 1024}k" if int(seqlen) % 1024 == 0 else f"{model} at {int(seqlen)}"


@metric
def training_speedup(frames, hardware, *, candidate="ours", baselines=None, dtype="bf16"):
    """End-to-end training (training.csv, eager rows): how many times faster a training step of `candidate`
    is than each of `baselines` ({name: provider}) at the same model, context and batch, as <name>_min,
    <name>_median, <name>_max, <name>_n and <name>_at_max; the candidate's best model TFLOP/s per GPU, its
    share of the datasheet peak (mfu_datasheet) and of the bf16 matmul ceiling measured interleaved with the
    run (mfu_ceiling); the baseline configurations that ran out of memory, with the largest batch that fit."""
    baselines = baselines or {"standard": "standard", "fa1": "ours_fa1"}
    values = {"n": 0, "best_tflops": None, "best_at": None, "mfu_datasheet": None, "mfu_ceiling": None,
              "ceiling_tflops": None, "datasheet_tflops": None, "gpu": None, "compiled": "not measured",
              "baseline_oom": "none", "excluded": "no cell excluded", "host_bound": 0, "noisy": 0}
    for name in baselines:
        values.update({f"{name}_{key}": None for key in ("min", "median", "max", "at_max")}, **{f"{name}_n": 0})
    if "training" not in frames:
        return values | {"missing": NOT_MEASURED.format("training")}
    frame = attention_rows(frames["training"])
    frame = frame[(frame["dtype"] == dtype) & (frame["mode"] == "train")]
    eager = frame[~frame["variant"].str.contains("+", regex=False)]
    keys = PAIR_KEYS + ["variant"]
    left_out = []
    for name, provider in baselines.items():
        pairs, excluded = paired(eager, {"provider": provider}, {"provider": candidate}, "ms", keys)
        left_out.append(excluded)
        if pairs.empty:
            continue
        ratios = summarise_ratios(pairs, {"variant": "variant", "seqlen_k": "seqlen"})
        values.update({f"{name}_{key}": ratios[key] for key in ("n", "min", "median", "max")},
                      **{f"{name}_at_max": _model_context(ratios["max_at_variant"], ratios["max_at_seqlen"])})
    excluded = pd.concat(left_out, ignore_index=True)
    values.update(excluded=describe_exclusions(excluded), **exclusion_counts(excluded))
    ours = eligible(aggregate(select(eager, {"provider": candidate}), "tflops"))
    values["n"] = len(ours)
    if ours.empty:
        return values | {"missing": f"no eligible {candidate} row in training.csv "
                                    f"({_status_counts(frames['training'], {'provider': candidate})})"}
    best = ours.loc[ours["tflops"].idxmax()]
    entry = datasheet_entry(best["gpu"], hardware)
    # the datasheet's dense fp16 tensor-core peak, which is also the dense bf16 peak on Ampere and Hopper
    datasheet = float(entry["dense_fp16_tflops"]) if entry else None
    ceiling = matmul_ceiling(frames, "training", dtype)
    values.update(best_tflops=float(best["tflops"]), best_at=_model_context(best["variant"], best["seqlen_k"]),
                  gpu=best["gpu"], datasheet_tflops=datasheet, mfu_datasheet=_share(float(best["tflops"]), datasheet),
                  ceiling_tflops=ceiling["tflops"] if ceiling else None,
                  mfu_ceiling=_share(float(best["tflops"]), ceiling["tflops"] if ceiling else None))
    timed = eligible(aggregate(select(frame, {"provider": candidate}), "ms")).set_index(["variant", "seqlen_k"])
    compiled_words = [f"{timed.loc[(model.removesuffix('+compile'), seqlen), 'ms'] / cell['ms']:.2f}x eager at "
                      f"{_model_context(model.removesuffix('+compile'), seqlen)}"
                      for (model, seqlen), cell in timed.iterrows()
                      if model.endswith("+compile") and (model.removesuffix("+compile"), seqlen) in timed.index]
    values["compiled"] = "; ".join(compiled_words) or "not measured"
    oom = aggregate(select(eager, {"provider": baselines.get("standard", "standard")}), "ms")
    oom = oom[oom["status"] == "oom"]
    if not oom.empty:
        largest = frame[frame["variant"].str.endswith("+largest_batch") & (frame["status"] == "ok")]
        words = []
        for _, cell in oom.iterrows():
            fit = largest[(largest["variant"] == cell["variant"] + "+largest_batch")
                          & (largest["seqlen_k"] == cell["seqlen_k"]) & (largest["provider"] == cell["provider"])]
            fits = f"batch {int(fit['batch'].iloc[0])} fits" if not fit.empty else "no batch fits"
            words.append(f"{_model_context(cell['variant'], cell['seqlen_k'])} (batch {int(cell['batch'])}; {fits})")
        values["baseline_oom"] = ", ".join(words)
    return values


@metric
def feature_speedup(frames, hardware, *, comparisons, modes, dtype="fp16"):
    """The features ablation (beyond the paper): for each of `comparisons` (analysis/features.py's COMPARISONS,
    a feature of ours against a peer), how many times faster ours is, per shape, as <name>_min, _median, _max,
    _at_longest, _worst_at and _n, in the first of `modes` where the first comparison has pairs (`mode`)."""
    from analysis import features

    values = features.summary(frames["features"], list(comparisons), list(modes), dtype, read_settings())
    if not values["n"]:
        values["missing"] = (f"no {dtype} shape in features.csv with eligible cells of both arms of "
                             f"{', '.join(comparisons)} ({_status_counts(frames['features'], {})})")
    return values


# ---------------------------------------------------------------- verdicts

def percent(share: float) -> str:
    """A share as a percentage with one decimal, truncated rather than rounded: 0.7299 -> "72.9%", so that a
    printed share never reaches a threshold its value misses."""
    return f"{math.floor(share * 1000 + 1e-9) / 10:.1f}%"


class _Template(string.Formatter):
    """str.format that writes "n/a" for a value the metric could not compute, and knows the format `pct`."""

    def format_field(self, value, format_spec):
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "n/a"
        if format_spec == "pct":
            return percent(value)
        if isinstance(value, str):
            return value
        return super().format_field(value, format_spec)


# "1.90-1.90x" -> "1.90x" and "98.5%-98.5%" -> "98.5%": a range whose ends print the same is one value.
_SAME_ENDS = re.compile(r"(?<![\w.:])(\d+(?:\.\d+)?)(%?)-\1\2(?=x(?!\w)|[^\w.%]|$)")
# "1 shapes" -> "1 shape": a count of one takes the singular (only the nouns the templates count).
_ONE_OF = re.compile(r"(?<![^\s(])1 ((?:more )?(?:shape|pair|cell|output|repetition|model/context pair))s\b")
# "98.5%-106.7%" -> "98.5-106.7%": a range of percentages writes the sign once, after its upper end.
_PERCENT_RANGE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)%-(\d+(?:\.\d+)?%)")
# "; 0 more shapes where only standard attention failed" -> "": a clause that counts zero more of something
# says nothing, so it goes, up to the next clause.
_ZERO_MORE = re.compile(r"; 0 more [^;]*?(?=;|$)")


def fill(template: str, values: dict) -> str:
    """The template with `values` in it (see `_Template`), its ranges of one value and counts of one said
    as such, a range of percentages with one sign and a clause of zero more of something left out."""
    text = _Template().format(template, **values)
    text = _ONE_OF.sub(r"1 \1", _SAME_ENDS.sub(r"\1\2", text))
    return _ZERO_MORE.sub("", _PERCENT_RANGE.sub(r"\1-\2", text))


def verdict_of(claim: dict, values: dict) -> str:
    if claim.get("not_comparable") and evaluate_rule(claim["not_comparable"], values):
        return NOT_COMPARABLE
    if not values["n"]:
        return NO_DATA
    holds = evaluate_rule(claim["holds"], values)
    if holds:
        return HOLDS
    partly = evaluate_rule(claim["partly"], values) if claim.get("partly") else None
    if partly:
        return PARTLY
    return NO_DATA if holds is None and partly is None else DOES_NOT_HOLD


RECORD_KEYS = ("id", "title", "claim", "source", "paper_value", "metric", "figure")


def evaluate_claims(frames: dict[str, pd.DataFrame], claims: list[dict], hardware: dict) -> list[dict]:
    """One record per claim: the claim's data, the metric's values, the verdict and the findings in words."""
    records = []
    for claim in claims:
        source = FIGURES[claim["figure"]][0]  # the results file the claim reads first (its figure's)
        if source not in frames:  # an ablation the archived run does not hold: read_results left it out
            values, verdict = {"n": 0, "missing": NOT_MEASURED.format(source)}, NO_DATA
        else:
            values = METRICS[claim["metric"]](frames, hardware, **claim.get("args", {}))
            verdict = verdict_of(claim, values)
        if verdict == NOT_COMPARABLE:
            finding = fill(claim["not_comparable_finding"], values)
        elif verdict == NO_DATA and "missing" in values:
            finding = values["missing"]
        else:
            finding = fill(claim["finding"], values)
        context = fill(claim["context"], values) if verdict in (PARTLY, DOES_NOT_HOLD) else ""
        note = fill(claim["note"], values) if claim.get("note") and verdict != NO_DATA else ""
        record = {key: claim[key] for key in RECORD_KEYS}
        record.update(rule={key: claim.get(key, "") for key in ("not_comparable", "holds", "partly")},
                      values=values, verdict=verdict, finding=finding, note=note, context=context)
        records.append(record)
    return records


def to_json(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def write_verdicts(records: list[dict], json_path: str | Path, csv_path: str | Path) -> None:
    Path(json_path).parent.mkdir(parents=True, exist_ok=True)
    Path(json_path).write_text(json.dumps(records, indent=2, default=to_json) + "\n")
    table = pd.DataFrame([{key: record[key] for key in ("id", "claim", "source", "paper_value", "finding", "verdict")}
                          for record in records])
    table.to_csv(csv_path, index=False)


def main(results_dir: str, json_path: str, csv_path: str) -> None:
    records = evaluate_claims(read_results(results_dir), read_claims(), read_hardware())
    write_verdicts(records, json_path, csv_path)
    for record in records:
        print(f"{record['verdict']:>14}  {record['id']}: {record['finding']}")


from analysis import decode as _decode_metrics  # noqa: E402, F401 (registers the decode ablation's metrics)


if __name__ == "__main__":
    # Run through the importable module: analysis.decode registers its metrics in analysis.claims.METRICS,
    # which under `python -m analysis.claims` is not this __main__ module's.
    from analysis import claims as _claims

    _claims.main(*sys.argv[1:])
