"""Compute each claim's metric from the results and its verdict from the rules in claims.yaml.

A metric is a function registered in METRICS: it takes the results frames (and the hardware data) plus
the claim's `args` and returns named values; the claim's `holds` and `partly` expressions are evaluated
over those values by a small expression evaluator (comparisons, and/or/not, arithmetic, min/max/abs;
an unknown value makes a comparison unknown instead of false). Verdicts: holds, partly, does not hold,
no data. Nothing here is typed from the paper: the thresholds live in claims.yaml.

    python -m analysis.claims RESULTS_DIR OUT_JSON OUT_CSV
"""
from __future__ import annotations

import ast
import json
import math
import operator
import string
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from analysis.load import SHAPE_COLUMNS, measured, read_results
from analysis.peaks import datasheet_entry, matmul_ceiling, read_hardware

CLAIMS_FILE = Path(__file__).with_name("claims.yaml")
HOLDS, PARTLY, DOES_NOT_HOLD, NO_DATA = "holds", "partly", "does not hold", "no data"
PAIR_KEYS = SHAPE_COLUMNS + ["mode"]
ERROR_QUANTITIES = {"err_o": "O", "err_lse": "LSE", "err_dq": "dQ", "err_dk": "dK", "err_dv": "dV"}


def read_claims(path: str | Path = CLAIMS_FILE) -> list[dict]:
    with open(path) as handle:
        return yaml.safe_load(handle)["claims"]


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


def select(frame: pd.DataFrame, arm: dict) -> pd.DataFrame:
    """Rows of `frame` whose columns equal the values in `arm` (e.g. {"provider": "standard"})."""
    mask = np.ones(len(frame), dtype=bool)
    for column, value in arm.items():
        mask &= (frame[column] == value).fillna(False).to_numpy()
    return frame[mask]


def paired_ratio(frame: pd.DataFrame, baseline: dict, candidate: dict, value: str = "ms",
                 keys: list[str] = PAIR_KEYS) -> pd.DataFrame:
    """Baseline over candidate `value`, one row per shape where both arms measured it (medians of repeats)."""
    def arm_values(arm):
        rows = measured(select(frame, arm)).dropna(subset=[value])
        return rows.groupby(keys, dropna=False)[value].median()

    pairs = pd.concat({"baseline": arm_values(baseline), "candidate": arm_values(candidate)}, axis=1).dropna()
    pairs["ratio"] = pairs["baseline"] / pairs["candidate"]
    return pairs.reset_index()


SHAPE_LABELS = {"seqlen_k": "seqlen", "head_dim": "head_dim", "causal": "causal"}


def summarise_ratios(pairs: pd.DataFrame, where: dict[str, str] = SHAPE_LABELS) -> dict:
    """n, min, median, max of pairs.ratio, the median at the longest sequence, and where the extremes are
    (as min_at_<label>, max_at_<label> for each column: label in `where`)."""
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
            item = pairs.loc[position, column]
            summary[f"{end}_at_{label}"] = item.item() if hasattr(item, "item") else item
    return summary


def _status_counts(frame: pd.DataFrame, arm: dict) -> str:
    counts = select(frame, arm)["status"].value_counts()
    return ", ".join(f"{count} {status}" for status, count in counts.items()) or "no rows"


@metric
def speedup(frames, hardware, *, experiment, baseline, candidate, modes, value="ms"):
    """How many times faster the candidate arm is than the baseline arm, in the first of `modes` with data."""
    frame = frames[experiment]
    for mode in modes:
        pairs = paired_ratio(frame[frame["mode"] == mode], baseline, candidate, value)
        if not pairs.empty:
            break
    summary = summarise_ratios(pairs)
    failed = select(frame[frame["mode"] == mode], baseline)
    failed = failed[failed["status"] != "ok"]
    ok_candidate = measured(select(frame[frame["mode"] == mode], candidate))
    summary["baseline_failed"] = len(failed.merge(ok_candidate[PAIR_KEYS].drop_duplicates(), on=PAIR_KEYS))
    summary["mode"] = mode
    if pairs.empty:
        summary["missing"] = (f"no shape in {experiment}.csv with both {baseline} ({_status_counts(frame, baseline)}) "
                              f"and {candidate} ({_status_counts(frame, candidate)}) measured")
    return summary


def _describe_shape(row) -> str:
    return (f"n = {row['seqlen_k']}, d = {row['head_dim']}, {'causal' if row['causal'] else 'non-causal'}, "
            f"{row['dtype']}")


@metric
def peak_fraction(frames, hardware, *, mode, provider="ours"):
    """Best TFLOP/s of `provider` in `mode` as a share of the datasheet peak and of the measured matmul ceiling."""
    rows = measured(frames["speed"])
    rows = rows[(rows["provider"] == provider) & (rows["mode"] == mode)].dropna(subset=["tflops"])
    if rows.empty:
        return {"n": 0, "best_tflops": None, "best_at": None, "datasheet_tflops": None, "ceiling_tflops": None,
                "of_datasheet": None, "of_ceiling": None, "ceiling_of_datasheet": None,
                "missing": f"no measured {provider} {mode} rows in speed.csv ({_status_counts(frames['speed'], {'provider': provider})})"}
    best = rows.loc[rows["tflops"].idxmax()]
    entry = datasheet_entry(best["gpu"], hardware)
    datasheet = float(entry["dense_fp16_tflops"]) if entry else None
    ceiling = matmul_ceiling(frames["ceiling"], best["dtype"])
    share = lambda part, whole: part / whole if part is not None and whole else None  # noqa: E731
    return {"n": len(rows), "best_tflops": float(best["tflops"]), "best_at": _describe_shape(best),
            "datasheet_tflops": datasheet, "ceiling_tflops": ceiling,
            "of_datasheet": share(float(best["tflops"]), datasheet), "of_ceiling": share(float(best["tflops"]), ceiling),
            "ceiling_of_datasheet": share(ceiling, datasheet)}


def loglog_slope(rows: pd.DataFrame) -> float | None:
    """Median over shapes of the slope of log(peak memory per batch*head) against log(sequence length)."""
    slopes = []
    for _, group in rows.groupby(["dtype", "head_dim", "causal"]):
        if group["seqlen_k"].nunique() < 2:
            continue
        per_head = group["peak_mem_bytes"] / (group["batch"] * group["heads"]).astype(float)
        slopes.append(np.polyfit(np.log(group["seqlen_k"].astype(float)), np.log(per_head), 1)[0])
    return float(np.median(slopes)) if slopes else None


@metric
def memory_scaling(frames, hardware, *, modes, provider="ours", baseline="standard", savings_at=(2048, 4096)):
    """Growth exponent of peak memory with sequence length, and the saving against the baseline."""
    frame = frames["seqlen"]
    for mode in modes:
        rows = measured(frame[(frame["mode"] == mode) & (frame["provider"] == provider)]).dropna(
            subset=["peak_mem_bytes"])
        if not rows.empty:
            break
    in_mode = frame[frame["mode"] == mode]
    baseline_rows = measured(in_mode[in_mode["provider"] == baseline]).dropna(subset=["peak_mem_bytes"])
    pairs = paired_ratio(in_mode, {"provider": baseline}, {"provider": provider}, "peak_mem_bytes")
    out_of_memory = in_mode[(in_mode["provider"] == baseline) & (in_mode["status"] == "oom")]["seqlen_k"]
    values = {"n": len(rows), "mode": mode, "slope": loglog_slope(rows), "baseline_slope": loglog_slope(baseline_rows),
              "baseline_oom_from": int(out_of_memory.min()) if not out_of_memory.empty else "never"}
    for seqlen in savings_at:
        at = pairs[pairs["seqlen_k"] == seqlen]["ratio"]
        values[f"saving_at_{seqlen // 1024}k"] = float(at.median()) if not at.empty else None
    for column in ("batch", "heads", "head_dim"):
        values[column] = "/".join(str(item) for item in sorted(rows[column].unique())) if not rows.empty else None
    if rows.empty:
        values["missing"] = f"no measured {provider} memory in seqlen.csv ({_status_counts(frame, {'provider': provider})})"
    return values


@metric
def error_ratio(frames, hardware, *, baseline, candidate):
    """Candidate's error over the baseline's, per output and gradient, both against the float64 reference."""
    frame = frames["accuracy"]
    long = frame.melt(id_vars=PAIR_KEYS + ["provider", "status"], value_vars=list(ERROR_QUANTITIES),
                      var_name="quantity", value_name="error")
    long["quantity"] = long["quantity"].map(ERROR_QUANTITIES)
    pairs = paired_ratio(long, {"provider": candidate}, {"provider": baseline}, "error", PAIR_KEYS + ["quantity"])
    summary = summarise_ratios(pairs, where={"quantity": "quantity", "dtype": "dtype", "seqlen_k": "seqlen"})
    if pairs.empty:
        summary["missing"] = (f"no shape in accuracy.csv with errors of both {candidate} "
                              f"({_status_counts(frame, {'provider': candidate})}) and {baseline} "
                              f"({_status_counts(frame, {'provider': baseline})})")
    return summary


# ---------------------------------------------------------------- verdicts

class _Template(string.Formatter):
    """str.format that writes "n/a" for a value the metric could not compute."""

    def format_field(self, value, format_spec):
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "n/a"
        if isinstance(value, str):
            return value
        return super().format_field(value, format_spec)


def fill(template: str, values: dict) -> str:
    return _Template().format(template, **values)


def verdict_of(claim: dict, values: dict) -> str:
    if not values["n"]:
        return NO_DATA
    holds = evaluate_rule(claim["holds"], values)
    if holds:
        return HOLDS
    partly = evaluate_rule(claim["partly"], values) if claim.get("partly") else None
    if partly:
        return PARTLY
    return NO_DATA if holds is None and partly is None else DOES_NOT_HOLD


def evaluate_claims(frames: dict[str, pd.DataFrame], claims: list[dict], hardware: dict) -> list[dict]:
    """One record per claim: the claim's data, the metric's values, the verdict and the findings in words."""
    records = []
    for claim in claims:
        values = METRICS[claim["metric"]](frames, hardware, **claim.get("args", {}))
        verdict = verdict_of(claim, values)
        finding = values["missing"] if verdict == NO_DATA and "missing" in values else fill(claim["finding"], values)
        context = fill(claim["context"], values) if verdict in (PARTLY, DOES_NOT_HOLD) else ""
        record = {key: claim[key] for key in ("id", "title", "claim", "source", "paper_value", "metric", "figure")}
        record.update(rule={"holds": claim["holds"], "partly": claim.get("partly", "")}, values=values,
                      verdict=verdict, finding=finding, context=context)
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


if __name__ == "__main__":
    main(*sys.argv[1:])
