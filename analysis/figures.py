"""Draw the report's figures from the results, each as PDF and PNG under a stable name.

Every figure takes the results frames and returns a matplotlib Figure; the provider and variant
palettes, orders and labels are fixed here so that a provider has the same colour in every figure.
Timed values are cells from analysis/cells.py: the median over repetitions, with error bars from the
repetitions' min to max; host-bound cells are drawn hollow and noisy ones hatched (kept, but they decide
no verdict). Rows whose status is not ok are shown (labelled bars, crosses, annotated cells), never
dropped silently. Each caption (analysis/captions/) says which shapes a figure shows and how.

    python -m analysis.figures NAME RESULTS_DIR OUT_DIR
"""
from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from analysis.catalog import FIGURES, figure_paths  # noqa: E402
from analysis.cells import HOST_BOUND, NOISY, aggregate, matmul_ceiling, paired  # noqa: E402
from analysis.claims import ERROR_QUANTITIES, memory_fits  # noqa: E402
from analysis.load import attention_rows, measured, read_loss, read_results  # noqa: E402
from analysis.peaks import datasheet_entry, read_hardware  # noqa: E402

GIB = 2**30
_COLOURS = sns.color_palette("colorblind")
# provider -> (label, colour), in legend order: baselines first, ours last (as in the paper's figures)
PROVIDERS = {
    "standard": ("Standard attention (PyTorch)", _COLOURS[7]),
    "sdpa_efficient": ("SDPA mem-efficient", _COLOURS[5]),
    "sdpa_flash": ("FlashAttention-2 CUDA (SDPA)", _COLOURS[0]),
    "flex": ("FlexAttention (Triton)", _COLOURS[4]),
    "sdpa_cudnn": ("cuDNN (SDPA)", _COLOURS[2]),
    "ours_fa1": ("FlashAttention-1 (our Triton port)", _COLOURS[8]),
    "ours": ("Ours (Triton)", _COLOURS[3]),
}
# fa1_vs_fa2 arms: the faithful FlashAttention-1 port is the baseline; the rest are FlashAttention-2
# with one (or both) FlashAttention-1-style changes, then FlashAttention-2 itself
VARIANTS = {
    "fa1": ("FlashAttention-1 (our port of Algorithm 1)", _COLOURS[7]),
    "fa1_both": ("FA2 with FA1's rescale and no sequence parallelism", _COLOURS[5]),
    "fa1_no_seqpar": ("FA2 without sequence parallelism", _COLOURS[9]),
    "fa1_rescale": ("FA2 rescaling every step", _COLOURS[0]),
    "atomic_dq": ("FA2 with atomic dQ", _COLOURS[1]),
    "fa2": ("FlashAttention-2", _COLOURS[3]),
}
RECOMPUTE_ARMS = {"recompute": ("recompute (FlashAttention)", _COLOURS[3]),
                  "store_scores": ("store the attention matrix", _COLOURS[7])}
MEMORY_SHAPES = {"fa1_readme": "FlashAttention-1's shape", "long_context": "our long-context shape"}
MODE_TITLES = {"fwd": "forward", "bwd": "backward", "fwd_bwd": "forward + backward"}
STATUS_LABELS = {"oom": "OOM", "unsupported": "n/a", "error": "err"}


def _style() -> None:
    sns.set_theme(context="paper", style="whitegrid", font_scale=0.9)


def _label_seqlen(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def _known(levels: dict, present) -> list:
    """The keys of `levels` that occur in `present`, then any unknown ones (drawn in grey)."""
    present = list(dict.fromkeys(present))
    return [key for key in levels if key in present] + sorted(key for key in present if key not in levels)


def _look(levels: dict, key):
    return levels.get(key, (str(key), (0.6, 0.6, 0.6)))


def _empty(message: str, size=(6, 2)):
    figure, axis = plt.subplots(figsize=size)
    axis.axis("off")
    axis.text(0.5, 0.5, message, ha="center", va="center")
    return figure


def _grouped_bars(axis, data: pd.DataFrame, x: str, hue: str, levels: dict, value: str, x_order, label_values=True):
    """Bars of `value` at each x, one per hue level, with error bars from `value`_min to `value`_max where the
    data has them; host-bound cells hollow, noisy ones hatched; failed cells get a label instead of a bar."""
    hues = _known(levels, data[hue])
    width = 0.8 / max(len(hues), 1)
    for index, level in enumerate(hues):
        rows = data[data[hue] == level].set_index(x)
        label, colour = _look(levels, level)
        keys = [key for key in x_order if key in rows.index]
        positions = [x_order.index(key) - 0.4 + width * (index + 0.5) for key in keys]
        ok = [rows.loc[key, "status"] == "ok" for key in keys]
        heights = [rows.loc[key, value] if good else 0.0 for key, good in zip(keys, ok)]
        excluded = [rows.loc[key, "excluded"] if "excluded" in rows else "" for key in keys]
        bars = axis.bar(positions, heights, width, color=colour, label=label, edgecolor=colour)
        for bar, reason in zip(bars, excluded):
            if reason == HOST_BOUND:
                bar.set_facecolor("none")
            elif reason == NOISY:
                bar.set_hatch("////")
                bar.set_facecolor(matplotlib.colors.to_rgba(colour, 0.35))
        if f"{value}_min" in rows:
            low = [h - rows.loc[k, f"{value}_min"] if good else 0 for k, h, good in zip(keys, heights, ok)]
            high = [rows.loc[k, f"{value}_max"] - h if good else 0 for k, h, good in zip(keys, heights, ok)]
            axis.errorbar(positions, heights, yerr=[np.nan_to_num(low), np.nan_to_num(high)], fmt="none",
                          ecolor="0.2", elinewidth=0.6, capsize=1.2)
        texts = [f"{h:.0f}" if good else STATUS_LABELS.get(rows.loc[key, "status"], "?")
                 for key, h, good in zip(keys, heights, ok)]
        if label_values or not all(ok):
            shown = [t if label_values or not good else "" for good, t in zip(ok, texts)]
            axis.bar_label(bars, shown, rotation=90, fontsize=5, padding=1.5)
    axis.set_xticks(range(len(x_order)), [_label_seqlen(k) if isinstance(k, (int, np.integer)) else k
                                          for k in x_order])


def _one_per_shape(frame: pd.DataFrame, keys: list[str], value: str) -> pd.DataFrame:
    """One row per `keys`: the cell's median `value` over its repetitions, min, max and exclusion (a cell
    whose keys leave out a shape column would pool shapes: callers filter to one shape per key first)."""
    cells = aggregate(attention_rows(frame), value)
    pooled = cells.groupby(keys, dropna=False).size()
    if (pooled > 1).any():
        raise ValueError(f"several cells per {keys}: filter the rows to one shape per key first")
    return cells


def _legend_markers(figure, axes) -> None:
    """Legend entries for how a bar is drawn when its cell decides no verdict."""
    axis = np.ravel(axes)[0]
    axis.bar([0], [0], color="none", edgecolor="0.3", label="host-bound (excluded)")
    axis.bar([0], [0], color="0.85", edgecolor="0.3", hatch="////", label="noisy (excluded)")


def _primary_dtype(frame: pd.DataFrame) -> str:
    dtypes = set(frame["dtype"])
    return "fp16" if "fp16" in dtypes or not dtypes else sorted(dtypes)[0]


def _panel_title(head_dim, causal) -> str:
    return f"head dim {head_dim}, {'causal' if causal else 'non-causal'}"


def _legend_below(figure, axes, ncol=6) -> None:
    handles = {}
    for axis in np.ravel(axes):
        for handle, label in zip(*axis.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    if not handles:
        return
    figure.legend(handles.values(), handles.keys(), loc="lower center", ncol=min(ncol, len(handles)),
                  frameon=False, bbox_to_anchor=(0.5, 0))


def draw_speed(frames, mode: str):
    frame = attention_rows(frames["speed"])
    frame = frame[frame["mode"] == mode]
    if frame.empty:
        return _empty(f"no {MODE_TITLES[mode]} rows in speed.csv")
    dtype = _primary_dtype(frame)
    frame = frame[frame["dtype"] == dtype]
    shapes = _one_per_shape(frame, ["provider", "head_dim", "causal", "seqlen_k"], "tflops")
    panels = sorted(shapes[["causal", "head_dim"]].drop_duplicates().itertuples(index=False))
    columns = min(2, len(panels))
    rows = -(-len(panels) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(7.2, 2.5 * rows + 0.6), squeeze=False, sharey=True)
    seqlens = sorted(shapes["seqlen_k"].unique())
    for axis, (causal, head_dim) in zip(axes.flat, panels):
        data = shapes[(shapes["causal"] == causal) & (shapes["head_dim"] == head_dim)]
        _grouped_bars(axis, data, "seqlen_k", "provider", PROVIDERS, "tflops", seqlens)
        axis.set_title(_panel_title(head_dim, causal))
        axis.set_xlabel("sequence length")
        axis.set_ylabel("TFLOP/s")
        axis.margins(y=0.15)
    for axis in axes.flat[len(panels):]:
        axis.axis("off")
    figure.suptitle(f"Attention {MODE_TITLES[mode]} speed ({dtype}; median of repetitions, bars min to max)")
    _legend_markers(figure, axes)
    _legend_below(figure, axes, ncol=4)
    figure.tight_layout(rect=(0, 0.08, 1, 1))
    return figure


def draw_memory(frames):
    frame = attention_rows(frames["seqlen"])
    frame = frame[frame["mode"].isin(MODE_TITLES) & (frame["causal"] == 0)]
    if frame.empty:
        return _empty("no non-causal rows in seqlen.csv")
    frame = frame[frame["dtype"] == _primary_dtype(frame)]
    shapes = [shape for shape in MEMORY_SHAPES if shape in set(frame["variant"])] + sorted(
        set(frame["variant"]) - set(MEMORY_SHAPES))
    quantities = {"attn_mem_bytes": "attention's own memory (GiB)", "peak_mem_bytes": "total, inputs included (GiB)"}
    fits = pd.concat([memory_fits(frame, value) for value in quantities], ignore_index=True)
    figure, axes = plt.subplots(len(quantities), len(shapes), figsize=(3.6 * len(shapes), 5.6), squeeze=False)
    styles = {"fwd_bwd": ("-", "o"), "fwd": ("--", "s")}
    for column, shape in enumerate(shapes):
        rows = frame[frame["variant"] == shape]
        for row_index, (value, ylabel) in enumerate(quantities.items()):
            axis = axes[row_index, column]
            cells = aggregate(rows, value)
            for provider in _known(PROVIDERS, cells["provider"]):
                label, colour = _look(PROVIDERS, provider)
                for mode, (line, marker) in styles.items():
                    mine = cells[(cells["provider"] == provider) & (cells["mode"] == mode)]
                    ok = mine[mine["status"] == "ok"].sort_values("seqlen_k")
                    axis.plot(ok["seqlen_k"], ok[value] / GIB, marker=marker, linestyle="none", color=colour,
                              markersize=4, label=f"{label}, {MODE_TITLES[mode]}")
                    fit = fits[(fits["provider"] == provider) & (fits["variant"] == shape) & (fits["mode"] == mode)
                               & (fits["value"] == value) & (fits["causal"] == 0)]
                    if not fit.empty and not ok.empty:
                        grid = np.geomspace(ok["seqlen_k"].min(), ok["seqlen_k"].max(), 50)
                        a, b, c = fit.iloc[0][["a", "b", "c"]]
                        axis.plot(grid, (a + b * grid + c * grid**2) / GIB, linestyle=line, color=colour,
                                  linewidth=1)
                    oom = mine[mine["status"] == "oom"]["seqlen_k"]
                    if not oom.empty:
                        axis.plot(oom, [1.0] * len(oom), "x", color=colour, markersize=8, mew=2, clip_on=False,
                                  transform=axis.get_xaxis_transform(), label=f"{label}: out of memory")
            axis.set_xscale("log", base=2)
            if (cells["status"] == "ok").any():
                axis.set_yscale("log")
            seqlens = sorted(rows["seqlen_k"].dropna().unique())
            axis.set_xticks(seqlens, [_label_seqlen(n) for n in seqlens], fontsize=6)
            axis.minorticks_off()
            first = rows.iloc[0]
            axis.set_title(f"{MEMORY_SHAPES.get(shape, shape)}: batch {first['batch']}, {first['heads']} heads, "
                           f"d {first['head_dim']}", fontsize=7)
            axis.set_xlabel("sequence length")
            axis.set_ylabel(ylabel, fontsize=7)
    _legend_below(figure, axes, ncol=3)
    figure.tight_layout(rect=(0, 0.13, 1, 1))
    return figure


def draw_tiles(frames, mode: str):
    frame = frames["tiles"]
    frame = frame[(frame["mode"] == mode) & (frame["provider"] == "ours")]
    if frame.empty:
        return _empty(f"no {MODE_TITLES[mode]} rows in tiles.csv")
    frame = frame[frame["dtype"] == _primary_dtype(frame)]
    if (frame["variant"] == "sweep").any():
        frame = frame[frame["variant"] == "sweep"]  # the engine's default config is one of the sweep's
    keys = ["head_dim", "num_warps", "num_stages", "block_m", "block_n"]
    shapes = _one_per_shape(frame, keys, "tflops")
    panel_rows = sorted(shapes[["head_dim", "num_warps"]].drop_duplicates().itertuples(index=False))
    stages = sorted(shapes["num_stages"].unique())
    block_ms, block_ns = sorted(shapes["block_m"].unique()), sorted(shapes["block_n"].unique())
    ok = shapes[shapes["status"] == "ok"]
    best = ok.loc[ok.groupby("head_dim")["tflops"].idxmax()].set_index("head_dim") if not ok.empty else None
    figure, axes = plt.subplots(len(panel_rows), len(stages), squeeze=False,
                                figsize=(1.2 + 2.2 * len(stages), 0.6 + 1.9 * len(panel_rows)))
    for (head_dim, warps), axis_row in zip(panel_rows, axes):
        vmin, vmax = ok.loc[ok["head_dim"] == head_dim, "tflops"].agg(["min", "max"])
        for stage, axis in zip(stages, axis_row):
            cells = shapes[(shapes["head_dim"] == head_dim) & (shapes["num_warps"] == warps)
                           & (shapes["num_stages"] == stage)]
            grid = (cells[cells["status"] == "ok"].pivot(index="block_m", columns="block_n", values="tflops")
                    .reindex(index=block_ms, columns=block_ns))
            sns.heatmap(grid, ax=axis, annot=True, fmt=".0f", cmap="rocket", vmin=vmin, vmax=vmax, cbar=False,
                        annot_kws={"fontsize": 7}, linewidths=0.5, linecolor="white")
            axis.set_facecolor("0.92")
            for failed in cells[cells["status"] != "ok"].itertuples():
                axis.text(block_ns.index(failed.block_n) + 0.5, block_ms.index(failed.block_m) + 0.5,
                          STATUS_LABELS[failed.status], ha="center", va="center", fontsize=7, color="0.4")
            if best is not None and head_dim in best.index:
                top = best.loc[head_dim]
                if (top["num_warps"], top["num_stages"]) == (warps, stage):
                    axis.add_patch(Rectangle((block_ns.index(top["block_n"]), block_ms.index(top["block_m"])), 1, 1,
                                             fill=False, edgecolor=_COLOURS[2], linewidth=3))
            axis.set_title(f"d={head_dim}, {warps} warps, {stage} stages", fontsize=8)
            axis.set_xlabel("BLOCK_N")
            axis.set_ylabel("BLOCK_M")
    shape = frame.iloc[0]
    figure.suptitle(f"Tile sweep, {MODE_TITLES[mode]} (TFLOP/s; n = {shape['seqlen_k']}, "
                    f"{'causal' if shape['causal'] else 'non-causal'}, {shape['dtype']})")
    figure.tight_layout()
    return figure


def _seqlen_axis(axis, seqlens) -> None:
    axis.set_xscale("log", base=2)
    axis.set_xticks(seqlens, [_label_seqlen(n) for n in seqlens])
    axis.minorticks_off()
    axis.set_xlabel("sequence length")


def _line_with_bars(axis, cells, value, colour, label, linestyle="-", scale=1.0):
    """A line through the cells' medians with min..max error bars; host-bound cells as hollow markers."""
    ok = cells[cells["status"] == "ok"].sort_values("seqlen_k")
    if ok.empty:
        return
    low, high = (ok[value] - ok[f"{value}_min"]) * scale, (ok[f"{value}_max"] - ok[value]) * scale
    axis.errorbar(ok["seqlen_k"], ok[value] * scale, yerr=[low, high], color=colour, linestyle=linestyle,
                  marker="o", markersize=4, capsize=2, label=label)
    out = ok[ok["excluded"] != ""]
    axis.plot(out["seqlen_k"], out[value] * scale, "o", markersize=6, markerfacecolor="white", color=colour)
    for row in cells[cells["status"] != "ok"].itertuples():
        axis.annotate(STATUS_LABELS.get(row.status, "?"), (row.seqlen_k, 1.0), xycoords=("data", "axes fraction"),
                      color=colour, fontsize=6, ha="center", va="bottom")


def draw_recompute(frames):
    frame = attention_rows(frames["recompute"])
    frame = frame[frame["mode"].isin(["bwd", "fwd_bwd"])]
    if frame.empty:
        return _empty("no backward rows in recompute.csv")
    frame = frame[frame["dtype"] == _primary_dtype(frame)]
    figure, axes = plt.subplots(1, 2, figsize=(7.2, 3.2))
    modes = {"bwd": "-", "fwd_bwd": "--"}
    for variant in _known(RECOMPUTE_ARMS, frame["variant"]):
        label, colour = _look(RECOMPUTE_ARMS, variant)
        for mode, line in modes.items():
            rows = frame[(frame["variant"] == variant) & (frame["mode"] == mode)]
            name = f"{label}, {MODE_TITLES[mode]}"
            _line_with_bars(axes[0], aggregate(rows, "ms"), "ms", colour, name, line)
            _line_with_bars(axes[1], aggregate(rows, "attn_mem_bytes"), "attn_mem_bytes", colour, name, line,
                            1 / GIB)
    seqlens = sorted(frame["seqlen_k"].unique())
    for axis, ylabel in zip(axes, ("time (ms)", "attention's own memory (GiB)")):
        _seqlen_axis(axis, seqlens)
        if axis.has_data():
            axis.set_yscale("log")
        axis.set_ylabel(ylabel)
    shape = frame.iloc[0]
    figure.suptitle(f"Backward pass: recompute or store (head dim {shape['head_dim']}, non-causal, {shape['dtype']})")
    _legend_below(figure, axes, ncol=2)
    figure.tight_layout(rect=(0, 0.14, 1, 1))
    return figure


def _ratio_line(axis, pairs, colour, label, linestyle="-"):
    pairs = pairs.sort_values("seqlen_k")
    axis.errorbar(pairs["seqlen_k"], pairs["ratio"], yerr=[pairs["ratio"] - pairs["ratio_lo"],
                                                          pairs["ratio_hi"] - pairs["ratio"]],
                  marker="o", markersize=4, capsize=2, linestyle=linestyle, color=colour, label=label)


def draw_causal(frames):
    frame = attention_rows(frames["causal"])
    frame = frame[frame["dtype"] == _primary_dtype(frame)] if not frame.empty else frame
    keys = ["dtype", "batch", "heads", "kv_heads", "seqlen_q", "seqlen_k", "head_dim", "mode"]
    comparisons = {"full": ("-", "against the same shape without a mask (the claim)"),
                   "mask_all_tiles": (":", "against masking every tile (context)")}
    pairs = pd.concat([paired(frame, {"variant": baseline}, {"variant": "skip_tiles"}, keys=keys)[0]
                       .assign(against=baseline) for baseline in comparisons], ignore_index=True)
    if pairs.empty:
        return _empty("no pairs of skip_tiles with full or mask_all_tiles cells in causal.csv")
    head_dims = sorted(pairs["head_dim"].unique())
    figure, axes = plt.subplots(1, len(head_dims), figsize=(3.6 * len(head_dims), 3.4), squeeze=False, sharey=True)
    mode_colours = dict(zip(MODE_TITLES, (_COLOURS[0], _COLOURS[1], _COLOURS[2])))
    for axis, head_dim in zip(axes.flat, head_dims):
        for (mode, against), group in pairs[pairs["head_dim"] == head_dim].groupby(["mode", "against"]):
            line, words = comparisons[against]
            _ratio_line(axis, group, mode_colours.get(mode, "grey"), f"{MODE_TITLES.get(mode, mode)}, {words}", line)
        axis.axhline(1, color="0.5", linewidth=0.8)
        axis.axhline(2, color="0.7", linewidth=0.8, linestyle="--")
        _seqlen_axis(axis, sorted(pairs["seqlen_k"].unique()))
        axis.set_title(f"head dim {head_dim}")
        axis.set_ylabel("speedup of causal with tile skipping")
    _legend_below(figure, axes, ncol=2)
    figure.tight_layout(rect=(0, 0.2, 1, 1))
    return figure


def draw_fa1_to_fa2(frames):
    frame = attention_rows(frames["fa1_vs_fa2"])
    if frame.empty or "fa1" not in set(frame["variant"]):
        return _empty("no fa1 rows to compare with in fa1_vs_fa2.csv")
    frame = frame[frame["dtype"] == _primary_dtype(frame)]
    # one shape family, so that each bar is one cell pair and its error bar the repetitions' spread
    head_dim = int(frame["head_dim"].max())
    frame = frame[(frame["head_dim"] == head_dim) & (frame["causal"] == 0)]
    ratios = []
    for variant in _known(VARIANTS, frame["variant"]):
        if variant != "fa1":
            pairs = paired(frame, {"variant": "fa1"}, {"variant": variant})[0]
            ratios.append(pairs.assign(variant=variant, status="ok", excluded=""))
    if not any(len(r) for r in ratios):
        return _empty("no measured pairs with the fa1 arm in fa1_vs_fa2.csv")
    ratios = pd.concat(ratios, ignore_index=True).rename(columns={"ratio_lo": "ratio_min", "ratio_hi": "ratio_max"})
    modes = [mode for mode in MODE_TITLES if mode in set(ratios["mode"])]
    figure, axes = plt.subplots(len(modes), 1, figsize=(7.2, 2.2 * len(modes) + 0.9), squeeze=False, sharey=True)
    seqlens = sorted(ratios["seqlen_k"].unique())
    for axis, mode in zip(axes.flat, modes):
        _grouped_bars(axis, ratios[ratios["mode"] == mode], "seqlen_k", "variant", VARIANTS, "ratio", seqlens,
                      label_values=False)
        axis.axhline(1, color="0.3", linewidth=0.8)
        axis.set_title(f"{MODE_TITLES[mode]} (head dim {head_dim}, non-causal, fp16)", fontsize=8)
        axis.set_ylabel("speedup over FA1")
        axis.set_xlabel("sequence length")
    _legend_below(figure, axes, ncol=2)
    figure.tight_layout(rect=(0, 0.12, 1, 1))
    return figure


def draw_peak_fraction(frames, hardware):
    rows = attention_rows(frames["speed"])
    rows = measured(rows[rows["mode"].isin(MODE_TITLES)])
    if rows.empty:
        return _empty("no measured rows in speed.csv")
    dtype = _primary_dtype(rows)
    rows = rows[rows["dtype"] == dtype]
    entry = datasheet_entry(rows["gpu"].iloc[0], hardware)
    ceiling = matmul_ceiling(frames, "speed", dtype)
    if entry is None:
        return _empty(f"no datasheet peak for GPU {rows['gpu'].iloc[0]!r} in analysis/hardware.yaml")
    datasheet = float(entry["dense_fp16_tflops"])
    cells = aggregate(rows, "tflops")
    cells = cells[(cells["status"] == "ok") & (cells["excluded"] == "")]
    best = cells.loc[cells.groupby(["mode", "provider"])["tflops"].idxmax()].copy()
    for column in ("tflops", "tflops_min", "tflops_max"):
        best[column.replace("tflops", "share")] = 100 * best[column] / datasheet
    modes = [mode for mode in MODE_TITLES if mode in set(best["mode"])]
    figure, axis = plt.subplots(figsize=(7.2, 3.4))
    _grouped_bars(axis, best, "mode", "provider", PROVIDERS, "share", modes, label_values=True)
    axis.set_xticks(range(len(modes)), [MODE_TITLES[m] for m in modes])
    axis.set_ylabel(f"% of datasheet peak ({datasheet:.1f} TFLOP/s)")
    axis.set_ylim(0, 100)
    if ceiling:
        # the peak-fraction verdicts read the ceiling's fastest repetition (a repetition on a clocked-down GPU
        # lowers the median), so the line and the right axis are drawn at it; the band spans the repetitions
        fastest = ceiling["max"]
        axis.axhspan(100 * ceiling["min"] / datasheet, 100 * fastest / datasheet, color="0.85", zorder=0)
        axis.axhline(100 * fastest / datasheet, color="0.3", linestyle="--", linewidth=1)
        right = axis.twinx()
        right.set_ylim(0, 100 * datasheet / fastest)
        right.grid(False)
        right.set_ylabel(f"% of matmul ceiling, fastest repetition ({fastest:.0f} TFLOP/s)")
    axis.set_title(f"Best cell over the speed grid, {entry['name']}, {dtype} (median of repetitions)")
    _legend_below(figure, [axis], ncol=3)
    figure.tight_layout(rect=(0, 0.12, 1, 1))
    return figure


def draw_accuracy(frames):
    frame = measured(frames["accuracy"])
    hosts = ", ".join(sorted({"CPU interpreter" if kind == "cpu-interpreter" else (gpu or kind)
                              for kind, gpu in zip(frame["host_kind"], frame["gpu"])}))
    long = frame.melt(id_vars=["provider", "dtype", "seqlen_k", "head_dim"], value_vars=list(ERROR_QUANTITIES),
                      var_name="quantity", value_name="error").dropna(subset=["error"])
    if long.empty:
        return _empty("no measured errors in accuracy.csv")
    long["quantity"] = long["quantity"].map(ERROR_QUANTITIES)
    providers = _known(PROVIDERS, long["provider"])
    dtypes = sorted(long["dtype"].unique())
    figure, axes = plt.subplots(1, len(dtypes), figsize=(3.6 * len(dtypes), 3.2), squeeze=False, sharey=True)
    np.random.seed(0)  # stripplot's jitter draws from numpy's global generator: the same results, the same figure
    for axis, dtype in zip(axes.flat, dtypes):
        sns.stripplot(long[long["dtype"] == dtype], x="quantity", y="error", hue="provider", hue_order=providers,
                      order=[q for q in ERROR_QUANTITIES.values() if q in set(long["quantity"])],
                      palette={p: _look(PROVIDERS, p)[1] for p in providers}, dodge=True, jitter=0.1, size=3.5,
                      log_scale=True, ax=axis, legend=False)
        axis.set_title(f"{dtype} (measured on {hosts})", fontsize=8)
        axis.set_xlabel("")
        axis.set_ylabel("relative error vs float64")
    for provider in providers:
        label, colour = _look(PROVIDERS, provider)
        axes.flat[0].plot([], [], "o", color=colour, label=label)
    _legend_below(figure, axes, ncol=3)
    figure.tight_layout(rect=(0, 0.14, 1, 1))
    return figure


def _training_label(variant: str, seqlen) -> str:
    """"gpt3_1_3b+compile" at 2048 -> "1.3B 2k compiled"."""
    model, *options = variant.split("+")
    size = model.removeprefix("gpt3_").replace("_", ".").upper()
    words = {"compile": "compiled", "largest_batch": "largest batch"}
    return " ".join([size, _label_seqlen(int(seqlen))] + [words.get(option, option) for option in options])


def draw_training(frames):
    """Model TFLOP/s per GPU of each attention by model and context (the paper's Table 1 as bars; error bars
    min..max over repetitions), and the loss-agreement curves beside it."""
    if "training" not in frames:
        return _empty("training: not measured in the archived run yet")
    frame = attention_rows(frames["training"])
    frame = frame[frame["mode"] == "train"]
    loss = frames.get("training_loss")
    figure, axes = plt.subplots(1, 2, figsize=(10.5, 3.6), gridspec_kw={"width_ratios": [2.2, 1]})
    if frame.empty:
        axes[0].axis("off")
        axes[0].text(0.5, 0.5, "no training rows", ha="center", va="center")
    else:
        cells = aggregate(frame, "tflops")
        cells["configuration"] = [_training_label(v, n) for v, n in zip(cells["variant"], cells["seqlen_k"])]
        order = sorted(dict.fromkeys(cells["configuration"]),
                       key=lambda label: (label.split()[0], int(label.split()[1].rstrip("k")), label))
        _grouped_bars(axes[0], cells, "configuration", "provider", PROVIDERS, "tflops", order)
        axes[0].set_ylabel("model TFLOP/s per GPU")
        axes[0].tick_params(axis="x", labelsize=6, rotation=20)
        axes[0].set_title(f"Training step, bf16 autocast ({frame['gpu'].iloc[0] or 'GPU'}; median of repetitions)",
                          fontsize=8)
    if loss is None or loss.empty:
        axes[1].axis("off")
        axes[1].text(0.5, 0.5, "no loss-agreement run", ha="center", va="center")
    else:
        for (provider, seed), curve in loss.groupby(["provider", "seed"], sort=False):
            label, colour = _look(PROVIDERS, provider)
            axes[1].plot(curve["step"], curve["loss"], color=colour, linewidth=0.8,
                         linestyle="-" if seed == loss["seed"].min() else ":", label=f"{label}, seed {seed}")
        axes[1].set_xlabel("step")
        axes[1].set_ylabel("training loss")
        axes[1].set_title("Loss agreement (small model)", fontsize=8)
        axes[1].legend(fontsize=6, frameon=False)
    _legend_below(figure, axes[:1], ncol=3)
    figure.tight_layout(rect=(0, 0.12, 1, 1))
    return figure


def _draw_decode(frames):
    from analysis.decode import draw as draw_decode

    return draw_decode(frames)


def _draw_fp8(frames):
    from analysis.fp8 import draw as draw_fp8

    return draw_fp8(frames)


# features: the peer each comparison sets ours against (analysis/features.py's COMPARISONS, by its words)
FEATURE_PEERS = {
    "ours, full causal": ("ours, full causal (no window)", _COLOURS[7]),
    "ours, padded dense batch": ("ours, padded dense batch", _COLOURS[1]),
    "ours without the feature": ("ours without the feature", _COLOURS[8]),
    "FlexAttention, sliding-window block mask": ("FlexAttention (block mask / score_mod)", _COLOURS[4]),
    "FlexAttention, score_mod": ("FlexAttention (block mask / score_mod)", _COLOURS[4]),
    "FlexAttention, document mask": ("FlexAttention (block mask / score_mod)", _COLOURS[4]),
    "FlashAttention-2 CUDA (SDPA flash)": ("FlashAttention-2 CUDA (SDPA flash)", _COLOURS[0]),
}


def draw_features(frames):
    """Speedup of ours with each feature against each peer, per shape (bars: peer ms / ours ms, medians over
    repetitions, error bars from the repetitions' extremes); a panel per feature, a row per pass."""
    from analysis import features

    if "features" not in frames:
        return _empty("features: not measured in the archived run yet")
    frame = features.with_features(frames["features"])
    modes = [mode for mode in ("fwd_bwd", "fwd", "bwd") if mode in set(frame["mode"])]
    pairs = features.all_pairs(frame, modes, _primary_dtype(frame) if not frame.empty else "fp16")
    if pairs.empty:
        return _empty("no measured pairs of a feature of ours and its peer in features.csv")
    pairs = pairs.rename(columns={"ratio_lo": "ratio_min", "ratio_hi": "ratio_max"}).assign(status="ok", excluded="")
    # one legend entry per kind of peer: the FlexAttention comparisons share a colour
    pairs["peer"] = [FEATURE_PEERS.get(words, (words,))[0] for words in pairs["against"]]
    levels = {look[0]: look for look in FEATURE_PEERS.values()}
    feature_order = [f for f in features.FEATURE_TITLES if f in set(pairs["feature"])]
    modes = [mode for mode in modes if mode in set(pairs["mode"])]
    figure, axes = plt.subplots(len(modes), len(feature_order), figsize=(3.0 * len(feature_order) + 0.6,
                                                                         2.6 * len(modes) + 0.9),
                                squeeze=False)
    for row, mode in enumerate(modes):
        for column, feature in enumerate(feature_order):
            axis = axes[row, column]
            data = pairs[(pairs["mode"] == mode) & (pairs["feature"] == feature)]
            if data.empty:
                axis.axis("off")
                continue
            order = list(dict.fromkeys(data.sort_values(["causal", "seqlen_k"])["shape"]))
            _grouped_bars(axis, data, "shape", "peer", levels, "ratio", order, label_values=False)
            axis.axhline(1, color="0.3", linewidth=0.8)
            axis.tick_params(axis="x", labelsize=6, rotation=20)
            axis.set_title(f"{features.FEATURE_TITLES[feature]}, {MODE_TITLES.get(mode, mode)}", fontsize=8)
            if column == 0:
                axis.set_ylabel("speedup of ours")
    _legend_below(figure, axes, ncol=4)
    figure.tight_layout(rect=(0, 0.1, 1, 1))
    return figure


HOPPER_ARMS = {
    "portable": ("portable FlashAttention-2 forward", _COLOURS[3]),
    "hopper_serial": ("+ TMA, warp specialisation, async wgmma", _COLOURS[9]),
    "hopper": ("+ softmax overlapped with P V", _COLOURS[1]),
    "hopper_bwd": ("+ one-pass backward, dQ by TMA reduce-add", _COLOURS[6]),
}


def draw_hopper(frames):
    """TFLOP/s of each Hopper arm and cuDNN by sequence length, a panel per head dim and mask, solid forward,
    dashed forward+backward (the portable backward after each forward arm), dotted backward (the portable
    backward, the one-pass Hopper backward and cuDNN's)."""
    if "hopper" not in frames:
        return _empty("hopper: not measured in the archived run yet")
    frame = measured(attention_rows(frames["hopper"]))
    if frame.empty:
        return _empty("no measured rows in hopper.csv (the Hopper arms need a compute capability 9.0 GPU)")
    frame = frame[frame["dtype"] == _primary_dtype(frame)]
    panels = sorted(frame.groupby(["head_dim", "causal"]).groups)
    figure, axes = plt.subplots(1, len(panels), figsize=(2.6 * len(panels), 3.2), squeeze=False, sharey=True)
    modes = {"fwd": "-", "fwd_bwd": "--", "bwd": ":"}
    arms = [(("ours", variant), *_look(HOPPER_ARMS, variant)) for variant in _known(HOPPER_ARMS, frame["variant"])]
    arms += [((provider, "default"), *_look(PROVIDERS, provider)) for provider in sorted(set(frame["provider"]) - {"ours"})]
    for axis, (head_dim, causal) in zip(axes.flat, panels):
        panel = frame[(frame["head_dim"] == head_dim) & (frame["causal"] == causal)]
        for (provider, variant), label, colour in arms:
            for mode, line in modes.items():
                rows = panel[(panel["provider"] == provider) & (panel["variant"] == variant) & (panel["mode"] == mode)]
                if not rows.empty:
                    _line_with_bars(axis, aggregate(rows, "tflops"), "tflops", colour,
                                    f"{label}, {MODE_TITLES[mode]}", line)
        _seqlen_axis(axis, sorted(panel["seqlen_k"].unique()))
        axis.set_title(_panel_title(head_dim, causal), fontsize=8)
        axis.set_ylabel("TFLOP/s")
    # the legend's rows (an entry per arm and mode) get their own inches below the panels and their labels
    entries = {label for axis in axes.flat for label in axis.get_legend_handles_labels()[1]}
    legend_inches = 0.22 * -(-len(entries) // 3) + 0.15
    figure.set_size_inches(figure.get_figwidth(), 2.9 + legend_inches)
    _legend_below(figure, axes, ncol=3)
    figure.tight_layout(rect=(0, legend_inches / (2.9 + legend_inches), 1, 1))
    return figure


def draw(name: str, frames: dict, hardware: dict):
    _style()
    if name.startswith("speed_"):
        return draw_speed(frames, name.removeprefix("speed_"))
    if name.startswith("tiles_"):
        return draw_tiles(frames, name.removeprefix("tiles_"))
    if name == "peak_fraction":
        return draw_peak_fraction(frames, hardware)
    return {"memory": draw_memory, "recompute": draw_recompute, "causal": draw_causal,
            "fa1_to_fa2": draw_fa1_to_fa2, "accuracy": draw_accuracy, "training": draw_training,
            "features": draw_features, "decode": _draw_decode, "fp8": _draw_fp8, "hopper": draw_hopper}[name](frames)


def save(figure, name: str, out_dir: str | Path) -> dict[str, Path]:
    paths = figure_paths(name, out_dir)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    for fmt, path in paths.items():
        figure.savefig(path, dpi=200, bbox_inches="tight", metadata={"CreationDate": None} if fmt == "pdf" else None)
    plt.close(figure)
    return paths


def main(name: str, results_dir: str, out_dir: str) -> None:
    frames = read_results(results_dir, FIGURES[name])
    if "training" in frames:
        frames["training_loss"] = read_loss(results_dir)
    save(draw(name, frames, read_hardware()), name, out_dir)


if __name__ == "__main__":
    main(*sys.argv[1:])
