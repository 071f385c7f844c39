"""Draw the report's figures from the results, each as PDF and PNG under a stable name.

Every figure takes the results frames and returns a matplotlib Figure; the provider and variant
palettes, orders and labels are fixed here so that a provider has the same colour in every figure.
Rows whose status is not ok are shown (labelled bars, crosses, annotated cells), never dropped silently.

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
from analysis.claims import ERROR_QUANTITIES, paired_ratio  # noqa: E402
from analysis.load import measured, read_results  # noqa: E402
from analysis.peaks import datasheet_entry, matmul_ceiling, read_hardware  # noqa: E402

GIB = 2**30
_COLOURS = sns.color_palette("colorblind")
# provider -> (label, colour), in legend order: baselines first, ours last (as in the paper's figures)
PROVIDERS = {
    "standard": ("Standard attention (PyTorch)", _COLOURS[7]),
    "sdpa_efficient": ("SDPA mem-efficient", _COLOURS[5]),
    "sdpa_flash": ("FlashAttention-2 CUDA (SDPA)", _COLOURS[0]),
    "flex": ("FlexAttention (Triton)", _COLOURS[4]),
    "sdpa_cudnn": ("cuDNN (SDPA)", _COLOURS[2]),
    "ours": ("Ours (Triton)", _COLOURS[3]),
}
VARIANTS = {
    "fa1_both": ("FA1-style: rescale every step, no sequence parallelism", _COLOURS[7]),
    "fa1_no_seqpar": ("+ deferred rescale", _COLOURS[9]),
    "fa1_rescale": ("+ sequence parallelism", _COLOURS[0]),
    "fa2": ("FlashAttention-2: both", _COLOURS[3]),
    "atomic_dq": ("FlashAttention-2 with atomic dQ", _COLOURS[1]),
}
RECOMPUTE_ARMS = {1: ("recompute (FlashAttention)", _COLOURS[3]), 0: ("store the attention matrix", _COLOURS[7])}
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
    """Bars of `value` at each x, one per hue level; rows with a failed status get a label instead of a bar."""
    hues = _known(levels, data[hue])
    width = 0.8 / max(len(hues), 1)
    for index, level in enumerate(hues):
        rows = data[data[hue] == level].set_index(x)
        label, colour = _look(levels, level)
        positions = [i - 0.4 + width * (index + 0.5) for i, key in enumerate(x_order) if key in rows.index]
        keys = [key for key in x_order if key in rows.index]
        heights = [rows.loc[key, value] if rows.loc[key, "status"] == "ok" else 0.0 for key in keys]
        bars = axis.bar(positions, heights, width, color=colour, label=label)
        texts = [f"{h:.0f}" if rows.loc[key, "status"] == "ok" else STATUS_LABELS[rows.loc[key, "status"]]
                 for key, h in zip(keys, heights)]
        if label_values or any(rows.loc[key, "status"] != "ok" for key in keys):
            shown = [t if label_values or rows.loc[k, "status"] != "ok" else "" for k, t in zip(keys, texts)]
            axis.bar_label(bars, shown, rotation=90, fontsize=5, padding=1.5)
    axis.set_xticks(range(len(x_order)), [_label_seqlen(k) if isinstance(k, (int, np.integer)) else k
                                          for k in x_order])


def _one_per_shape(frame: pd.DataFrame, keys: list[str], value: str) -> pd.DataFrame:
    """One row per `keys`: the median of `value` over measured repeats, else the status of a failed row."""
    ok = measured(frame).groupby(keys, dropna=False)[value].median().reset_index().assign(status="ok")
    failed = frame[frame["status"] != "ok"].drop_duplicates(keys)[keys + ["status"]]
    failed = failed.merge(ok[keys], on=keys, how="left", indicator=True)
    failed = failed[failed["_merge"] == "left_only"].drop(columns="_merge")
    return pd.concat([ok, failed], ignore_index=True)


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
    figure.legend(handles.values(), handles.keys(), loc="lower center", ncol=min(ncol, len(handles)),
                  frameon=False, bbox_to_anchor=(0.5, 0))


def draw_speed(frames, mode: str):
    frame = frames["speed"]
    frame = frame[(frame["mode"] == mode) & frame["provider"].isin(PROVIDERS)]
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
    figure.suptitle(f"Attention {MODE_TITLES[mode]} speed ({dtype})")
    _legend_below(figure, axes, ncol=3)
    figure.tight_layout(rect=(0, 0.08, 1, 1))
    return figure


def draw_memory(frames):
    frame = frames["seqlen"]
    frame = frame[frame["mode"].isin(MODE_TITLES)]
    if frame.empty:
        return _empty("no rows in seqlen.csv")
    frame = frame[frame["dtype"] == _primary_dtype(frame)]
    modes = [mode for mode in MODE_TITLES if mode in set(frame["mode"])]
    figure, axes = plt.subplots(1, len(modes), figsize=(3.6 * len(modes), 3.2), squeeze=False)
    for axis, mode in zip(axes.flat, modes):
        rows = frame[frame["mode"] == mode]
        shapes = _one_per_shape(rows, ["provider", "seqlen_k"], "peak_mem_bytes")
        for provider in _known(PROVIDERS, shapes["provider"]):
            label, colour = _look(PROVIDERS, provider)
            ok = shapes[(shapes["provider"] == provider) & (shapes["status"] == "ok")].sort_values("seqlen_k")
            axis.plot(ok["seqlen_k"], ok["peak_mem_bytes"] / GIB, "o-", color=colour, label=label)
            out_of_memory = shapes[(shapes["provider"] == provider) & (shapes["status"] == "oom")]["seqlen_k"]
            if not out_of_memory.empty:
                axis.plot(out_of_memory, [1.0] * len(out_of_memory), "x", color=colour, markersize=9, mew=2,
                          transform=axis.get_xaxis_transform(), clip_on=False, label=f"{label}: out of memory")
                axis.axvline(out_of_memory.min(), color=colour, linestyle=":", linewidth=1)
        axis.set_xscale("log", base=2)
        if (shapes["status"] == "ok").any():
            axis.set_yscale("log")
        seqlens = sorted(shapes["seqlen_k"].unique())
        axis.set_xticks(seqlens, [_label_seqlen(n) for n in seqlens])
        axis.minorticks_off()
        shape = rows.iloc[0]
        axis.set_title(f"{MODE_TITLES[mode]}\nbatch {shape['batch']}, {shape['heads']} heads, "
                       f"head dim {shape['head_dim']}", fontsize=8)
        axis.set_xlabel("sequence length")
        axis.set_ylabel("peak memory (GiB)")
    _legend_below(figure, axes, ncol=2)
    figure.tight_layout(rect=(0, 0.14, 1, 1))
    return figure


def draw_tiles(frames, mode: str):
    frame = frames["tiles"]
    frame = frame[(frame["mode"] == mode) & (frame["provider"] == "ours")]
    if frame.empty:
        return _empty(f"no {MODE_TITLES[mode]} rows in tiles.csv")
    frame = frame[frame["dtype"] == _primary_dtype(frame)]
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


def _arm_lines(axis, data, arm_column, levels, value, scale=1.0, style_column=None):
    styles = dict(zip(sorted(data[style_column].unique()), ["-", "--", ":", "-."])) if style_column else {}
    for level in _known(levels, data[arm_column]):
        label, colour = _look(levels, level)
        for style_key, group in (data[data[arm_column] == level].groupby(style_column) if style_column
                                 else [(None, data[data[arm_column] == level])]):
            ok = group[group["status"] == "ok"].sort_values("seqlen_k")
            name = f"{label}, {MODE_TITLES.get(style_key, style_key)}" if style_column else label
            axis.plot(ok["seqlen_k"], ok[value] * scale, marker="o", linestyle=styles.get(style_key, "-"),
                      color=colour, label=name)
            failed = group[group["status"] != "ok"]
            for row in failed.itertuples():
                axis.annotate(STATUS_LABELS[row.status], (row.seqlen_k, 1.0), xycoords=("data", "axes fraction"),
                              color=colour, fontsize=6, ha="center", va="bottom")


def _seqlen_axis(axis, seqlens) -> None:
    axis.set_xscale("log", base=2)
    axis.set_xticks(seqlens, [_label_seqlen(n) for n in seqlens])
    axis.minorticks_off()
    axis.set_xlabel("sequence length")


def draw_recompute(frames):
    frame = frames["recompute"]
    frame = frame[frame["mode"].isin(["bwd", "fwd_bwd"]) & frame["recompute"].notna()]
    if frame.empty:
        return _empty("no backward rows in recompute.csv")
    frame = frame[frame["dtype"] == _primary_dtype(frame)]
    keys = ["recompute", "mode", "seqlen_k"]
    timing = _one_per_shape(frame, keys, "ms")
    memory = _one_per_shape(frame, keys, "peak_mem_bytes")
    figure, axes = plt.subplots(1, 2, figsize=(7.2, 3.2))
    _arm_lines(axes[0], timing, "recompute", RECOMPUTE_ARMS, "ms", style_column="mode")
    _arm_lines(axes[1], memory, "recompute", RECOMPUTE_ARMS, "peak_mem_bytes", 1 / GIB, style_column="mode")
    seqlens = sorted(frame["seqlen_k"].unique())
    for axis, ylabel, shapes in zip(axes, ("time (ms)", "peak memory (GiB)"), (timing, memory)):
        _seqlen_axis(axis, seqlens)
        if (shapes["status"] == "ok").any():
            axis.set_yscale("log")
        axis.set_ylabel(ylabel)
    shape = frame.iloc[0]
    figure.suptitle(f"Backward pass: recompute or store (head dim {shape['head_dim']}, {shape['dtype']})")
    _legend_below(figure, axes, ncol=2)
    figure.tight_layout(rect=(0, 0.14, 1, 1))
    return figure


def draw_causal(frames):
    frame = frames["causal"]
    skip = {"variant": "skip_tiles"}
    comparisons = {"mask_all_tiles": "-", "full": "--"}
    pairs = []
    for baseline in comparisons:
        ratio = paired_ratio(frame, {"variant": baseline}, skip, keys=["dtype", "head_dim", "mode", "seqlen_k"])
        pairs.append(ratio.assign(against=baseline))
    pairs = pd.concat(pairs, ignore_index=True)
    if pairs.empty:
        return _empty("no pairs of skip_tiles with mask_all_tiles or full rows in causal.csv")
    pairs = pairs[pairs["dtype"] == _primary_dtype(pairs)]
    head_dims = sorted(pairs["head_dim"].unique())
    figure, axes = plt.subplots(1, len(head_dims), figsize=(3.6 * len(head_dims), 3.2), squeeze=False, sharey=True)
    mode_colours = dict(zip(MODE_TITLES, (_COLOURS[0], _COLOURS[1], _COLOURS[2])))
    for axis, head_dim in zip(axes.flat, head_dims):
        for (mode, against), group in pairs[pairs["head_dim"] == head_dim].groupby(["mode", "against"]):
            group = group.sort_values("seqlen_k")
            name = "every tile masked" if against == "mask_all_tiles" else "non-causal"
            axis.plot(group["seqlen_k"], group["ratio"], marker="o", linestyle=comparisons[against],
                      color=mode_colours.get(mode, "grey"), label=f"{MODE_TITLES.get(mode, mode)}, vs {name}")
        axis.axhline(1, color="0.5", linewidth=0.8)
        _seqlen_axis(axis, sorted(pairs["seqlen_k"].unique()))
        axis.set_title(f"head dim {head_dim}")
        axis.set_ylabel("speedup from skipping masked tiles")
    _legend_below(figure, axes, ncol=3)
    figure.tight_layout(rect=(0, 0.16, 1, 1))
    return figure


def draw_fa1_to_fa2(frames):
    frame = frames["fa1_vs_fa2"]
    keys = ["dtype", "head_dim", "causal", "mode", "seqlen_k"]
    ratios = [paired_ratio(frame, {"variant": "fa1_both"}, {"variant": variant}, keys=keys).assign(variant=variant)
              for variant in _known(VARIANTS, frame["variant"])]
    ratios = pd.concat(ratios, ignore_index=True) if ratios else pd.DataFrame()
    if ratios.empty:
        return _empty("no fa1_both rows to compare with in fa1_vs_fa2.csv")
    ratios = ratios[ratios["dtype"] == _primary_dtype(ratios)]
    # one bar per (variant, mode, seqlen): the median over head dims and masks
    ratios = ratios.groupby(["variant", "mode", "seqlen_k"])["ratio"].median().reset_index().assign(status="ok")
    modes = [mode for mode in MODE_TITLES if mode in set(ratios["mode"])]
    figure, axes = plt.subplots(len(modes), 1, figsize=(7.2, 2.3 * len(modes) + 0.6), squeeze=False, sharey=True)
    seqlens = sorted(ratios["seqlen_k"].unique())
    for axis, mode in zip(axes.flat, modes):
        _grouped_bars(axis, ratios[ratios["mode"] == mode], "seqlen_k", "variant", VARIANTS, "ratio", seqlens,
                      label_values=False)
        axis.axhline(1, color="0.3", linewidth=0.8)
        axis.set_title(MODE_TITLES[mode])
        axis.set_ylabel("speedup over FA1-style")
        axis.set_xlabel("sequence length")
    _legend_below(figure, axes, ncol=2)
    figure.tight_layout(rect=(0, 0.1, 1, 1))
    return figure


def draw_peak_fraction(frames, hardware):
    rows = measured(frames["speed"]).dropna(subset=["tflops"])
    rows = rows[rows["mode"].isin(MODE_TITLES)]
    if rows.empty:
        return _empty("no measured rows in speed.csv")
    dtype = _primary_dtype(rows)
    rows = rows[rows["dtype"] == dtype]
    entry = datasheet_entry(rows["gpu"].iloc[0], hardware)
    ceiling = matmul_ceiling(frames["ceiling"], dtype)
    if entry is None:
        return _empty(f"no datasheet peak for GPU {rows['gpu'].iloc[0]!r} in analysis/hardware.yaml")
    datasheet = float(entry["dense_fp16_tflops"])
    best = rows.groupby(["mode", "provider"])["tflops"].max().reset_index().assign(status="ok")
    best["share"] = 100 * best["tflops"] / datasheet
    modes = [mode for mode in MODE_TITLES if mode in set(best["mode"])]
    figure, axis = plt.subplots(figsize=(7.2, 3.4))
    _grouped_bars(axis, best, "mode", "provider", PROVIDERS, "share", modes, label_values=True)
    axis.set_xticks(range(len(modes)), [MODE_TITLES[m] for m in modes])
    axis.set_ylabel(f"% of datasheet peak ({datasheet:.0f} TFLOP/s)")
    axis.set_ylim(0, 100)
    if ceiling:
        axis.axhline(100 * ceiling / datasheet, color="0.3", linestyle="--", linewidth=1)
        right = axis.twinx()
        right.set_ylim(0, 100 * datasheet / ceiling)
        right.grid(False)
        right.set_ylabel(f"% of measured matmul ceiling ({ceiling:.0f} TFLOP/s)")
    axis.set_title(f"Best TFLOP/s over the speed grid, {entry['name']}, {dtype}")
    _legend_below(figure, [axis], ncol=3)
    figure.tight_layout(rect=(0, 0.12, 1, 1))
    return figure


def draw_accuracy(frames):
    frame = measured(frames["accuracy"])
    long = frame.melt(id_vars=["provider", "dtype", "seqlen_k", "head_dim"], value_vars=list(ERROR_QUANTITIES),
                      var_name="quantity", value_name="error").dropna(subset=["error"])
    if long.empty:
        return _empty("no measured errors in accuracy.csv")
    long["quantity"] = long["quantity"].map(ERROR_QUANTITIES)
    providers = _known(PROVIDERS, long["provider"])
    dtypes = sorted(long["dtype"].unique())
    figure, axes = plt.subplots(1, len(dtypes), figsize=(3.6 * len(dtypes), 3.2), squeeze=False, sharey=True)
    for axis, dtype in zip(axes.flat, dtypes):
        sns.stripplot(long[long["dtype"] == dtype], x="quantity", y="error", hue="provider", hue_order=providers,
                      order=[q for q in ERROR_QUANTITIES.values() if q in set(long["quantity"])],
                      palette={p: _look(PROVIDERS, p)[1] for p in providers}, dodge=True, jitter=0.1, size=3.5,
                      log_scale=True, ax=axis, legend=False)
        axis.set_title(dtype)
        axis.set_xlabel("")
        axis.set_ylabel("relative error vs float64")
    for provider in providers:
        label, colour = _look(PROVIDERS, provider)
        axes.flat[0].plot([], [], "o", color=colour, label=label)
    _legend_below(figure, axes, ncol=3)
    figure.tight_layout(rect=(0, 0.14, 1, 1))
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
            "fa1_to_fa2": draw_fa1_to_fa2, "accuracy": draw_accuracy}[name](frames)


def save(figure, name: str, out_dir: str | Path) -> dict[str, Path]:
    paths = figure_paths(name, out_dir)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    for fmt, path in paths.items():
        figure.savefig(path, dpi=200, bbox_inches="tight", metadata={"CreationDate": None} if fmt == "pdf" else None)
    plt.close(figure)
    return paths


def main(name: str, results_dir: str, out_dir: str) -> None:
    frames = read_results(results_dir, FIGURES[name])
    save(draw(name, frames, read_hardware()), name, out_dir)


if __name__ == "__main__":
    main(*sys.argv[1:])
