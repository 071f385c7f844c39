"""The fp8 ablation in the report (beyond the paper): fp8 over fp16 forward speed-ups, the precision table, and
their figure.

fp8.csv (experiments/fp8.py) holds, per head dim, mask and sequence length of the paper's shapes, the engine's
forward on fp16 inputs (provider `ours`, dtype fp16) and on e4m3 inputs with per-(batch, head) descales
(`ours_fp8`, dtype fp8_e4m3), timed in repeated passes; and, once, accuracy cells (variant "accuracy"): the
output's relative RMS error (err_o) and largest absolute error (max_abs_err_o) against float64, for fp8, fp16
and bf16. A speed-up is the fp16 cell's median time over the fp8 cell's at the same shape (analysis/cells.py:
medians over repetitions, host-bound and noisy cells left out). The claim's metric is analysis.claims'
speedup_by_mode, pairing the two arms without the dtype column.
"""
from __future__ import annotations

import pandas as pd

from analysis.cells import PAIR_KEYS, describe_exclusions, exclusion_counts, paired
from analysis.load import attention_rows, measured

ACCURACY = "accuracy"  # experiments/fp8.py's variant of the accuracy cells
FP8 = "fp8_e4m3"
BASELINE = {"provider": "ours", "dtype": "fp16", "variant": "default"}
CANDIDATE = {"provider": "ours_fp8", "dtype": FP8, "variant": "default"}
SPEED_KEYS = [key for key in PAIR_KEYS if key != "dtype"]  # the arms differ in dtype by design
PRECISIONS = {FP8: "fp8 (e4m3)", "fp16": "fp16", "bf16": "bf16"}
REFERENCES = {FP8: "float64 attention of the dequantised inputs", "fp16": "float64 attention of the same inputs",
              "bf16": "float64 attention of the same inputs"}
HOST_WORDS = {"cuda": "the GPU", "cpu-interpreter": "the CPU, in Triton's interpreter (small shapes)"}


def speed_pairs(frame: pd.DataFrame, mode: str = "fwd") -> tuple[pd.DataFrame, pd.DataFrame]:
    """fp16 over fp8 time per shape in `mode` (ratio > 1: fp8 faster), with the repetitions' extremes; and the
    cells of either arm left out (host-bound, noisy)."""
    rows = attention_rows(frame)
    return paired(rows[rows["mode"] == mode], BASELINE, CANDIDATE, "ms", SPEED_KEYS)


def mask_of(causal) -> str:
    return "causal" if int(causal) else "full"


def precision(frame: pd.DataFrame) -> pd.DataFrame:
    """The measured accuracy cells, one row each, in the order head dim, mask, precision."""
    rows = measured(frame[frame["variant"] == ACCURACY]).dropna(subset=["err_o"]).copy()
    order = {dtype: index for index, dtype in enumerate(PRECISIONS)}
    rows["order"] = rows["dtype"].map(order).fillna(len(order))
    return rows.sort_values(["head_dim", "causal", "seqlen_k", "order"], kind="stable").drop(columns="order")


def _length(n) -> str:
    n = int(n)
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def facts(frames: dict[str, pd.DataFrame]) -> dict:
    """The report's fp8 tables, or measured=False without fp8.csv: the speed-up per head dim and mask at each
    sequence length, the shapes' tokens and hidden size, the cells left out; the error of each precision per
    accuracy shape, where it was measured, and the median ratio of fp8's relative error to fp16's and bf16's."""
    if "fp8" not in frames:
        return {"measured": False, "speed_rows": [], "precision_rows": []}
    frame = frames["fp8"]
    pairs, excluded = speed_pairs(frame)
    seqlens = sorted(int(n) for n in pairs["seqlen_k"].unique())
    speed_rows = []
    for (head_dim, causal), group in pairs.groupby(["head_dim", "causal"], sort=True):
        at = {int(row.seqlen_k): row.ratio for row in group.itertuples()}
        speed_rows.append({"head_dim": int(head_dim), "mask": mask_of(causal),
                           "ratios": [f"{at[n]:.2f}x" if n in at else "-" for n in seqlens]})
    timed = measured(attention_rows(frame))
    timed = timed[(timed["variant"] != ACCURACY) & timed["seqlen_k"].notna()]
    tokens = sorted({int(b * n) for b, n in zip(timed["batch"], timed["seqlen_q"])})
    hidden = sorted({int(h * d) for h, d in zip(timed["heads"], timed["head_dim"])})
    errors = precision(frame)
    precision_rows = [{"head_dim": int(row.head_dim), "mask": mask_of(row.causal),
                       "shape": f"batch {int(row.batch)}, {int(row.heads)} heads, {int(row.seqlen_q)} x "
                                f"{int(row.seqlen_k)}",
                       "precision": PRECISIONS.get(row.dtype, row.dtype), "reference": REFERENCES.get(row.dtype, "-"),
                       "err_o": f"{row.err_o:.2e}",
                       "max_abs": "-" if pd.isna(row.max_abs_err_o) else f"{row.max_abs_err_o:.2e}"}
                      for row in errors.itertuples()]
    hosts = sorted({f"{HOST_WORDS.get(kind, kind or 'an unrecorded host')}" + (f" ({gpu})" if kind == "cuda" and gpu
                                                                              else "")
                    for kind, gpu in zip(errors["host_kind"], errors["gpu"])})
    by_shape = errors.pivot_table(index=["head_dim", "causal", "batch", "heads", "seqlen_q", "seqlen_k"],
                                  columns="dtype", values="err_o")
    over = {}
    for other in ("fp16", "bf16"):
        if FP8 in by_shape and other in by_shape:
            ratios = (by_shape[FP8] / by_shape[other]).dropna()
            over[other] = f"{ratios.median():.1f}" if len(ratios) else None
        else:
            over[other] = None
    return {"measured": True, "seqlens": [_length(n) for n in seqlens], "speed_rows": speed_rows,
            "tokens": ", ".join(str(t) for t in tokens) or "-", "hidden": ", ".join(str(h) for h in hidden) or "-",
            "excluded": describe_exclusions(excluded), **exclusion_counts(excluded),
            "precision_rows": precision_rows, "hosts": " and ".join(hosts) or "no host",
            "fp8_over_fp16": over["fp16"], "fp8_over_bf16": over["bf16"]}


def draw(frames):
    """Left: fp8 over fp16 forward speed-up against sequence length, one line per head dim and mask (medians over
    repetitions, error bars from their extremes; host-bound and noisy cells left out, as in the verdict). Right:
    the relative RMS error of each precision's output against float64 per accuracy shape (log scale)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    from analysis.figures import _empty, _seqlen_axis

    if "fp8" not in frames:
        return _empty("fp8: not measured in the archived run yet")
    frame = frames["fp8"]
    pairs, _ = speed_pairs(frame)
    errors = precision(frame)
    if pairs.empty and errors.empty:
        return _empty("fp8: no measured pair of fp16 and fp8 cells, and no measured error")
    figure, (left, right) = plt.subplots(1, 2, figsize=(10.0, 3.6), gridspec_kw={"width_ratios": [1.3, 1]})
    if pairs.empty:
        left.axis("off")
        left.text(0.5, 0.5, "no measured pair of fp16 and fp8 cells", ha="center", va="center")
    else:
        lines = sorted(set(zip(pairs["head_dim"], pairs["causal"])))
        colours = dict(zip(sorted({int(d) for d, _ in lines}), sns.color_palette("colorblind")))
        for head_dim, causal in lines:
            group = pairs[(pairs["head_dim"] == head_dim) & (pairs["causal"] == causal)].sort_values("seqlen_k")
            left.errorbar(group["seqlen_k"], group["ratio"], yerr=[group["ratio"] - group["ratio_lo"],
                                                                 group["ratio_hi"] - group["ratio"]],
                          marker="o" if causal else "s", markersize=4, capsize=2, color=colours[int(head_dim)],
                          linestyle="--" if causal else "-", label=f"head dim {int(head_dim)}, {mask_of(causal)}")
        left.axhline(1, color="0.5", linewidth=0.8)
        _seqlen_axis(left, sorted(int(n) for n in pairs["seqlen_k"].unique()))
        left.set_ylabel("fp8 speed-up over fp16 (fp16 ms / fp8 ms)")
        left.set_title("Forward, fp8 (e4m3) against our fp16 (median of repetitions)", fontsize=8)
        left.legend(fontsize=7, frameon=False)
    if errors.empty:
        right.axis("off")
        right.text(0.5, 0.5, "no measured error", ha="center", va="center")
    else:
        errors = errors.assign(shape=[f"d{int(d)} {mask_of(c)}" for d, c in zip(errors["head_dim"], errors["causal"])],
                               precision=[PRECISIONS.get(dtype, dtype) for dtype in errors["dtype"]])
        order = list(dict.fromkeys(errors["shape"]))
        hues = [label for label in PRECISIONS.values() if label in set(errors["precision"])]
        hues += sorted(set(errors["precision"]) - set(hues))
        width = 0.8 / len(hues)
        colours = sns.color_palette("colorblind")
        for index, label in enumerate(hues):
            # the median over the accuracy shapes of a head dim and mask (one shape each, as configured)
            heights = errors[errors["precision"] == label].groupby("shape")["err_o"].median()
            positions = [order.index(shape) - 0.4 + width * (index + 0.5) for shape in heights.index]
            right.bar(positions, heights.values, width, color=colours[(3 + index) % len(colours)], label=label)
        right.set_yscale("log")
        right.set_ylim(top=float(errors["err_o"].max()) * 10)  # room for the legend above the bars
        right.set_xticks(range(len(order)), order)
        right.set_xlabel("")
        right.set_ylabel("relative RMS error of O vs float64")
        kinds = sorted({"CPU interpreter" if kind == "cpu-interpreter" else (gpu or kind)
                        for kind, gpu in zip(errors["host_kind"], errors["gpu"])})
        right.set_title(f"Output error by precision (measured on {', '.join(kinds)})", fontsize=8)
        right.legend(fontsize=7, frameon=False, ncol=len(hues), loc="upper center")
    figure.tight_layout()
    return figure
