"""The decode ablation in the report (beyond the paper): its claim metrics, its figure and its table.

decode.csv (experiments/decode.py) holds one new token attending to a full KV cache per batch, cache
length (seqlen_k), head layout and dtype: `ours` on a dense cache (variant "dense") and on paged caches
("paged<page_size>"), `sdpa` (the fastest SDPA backend) and `flex`, each with its achieved bandwidth
(bandwidth_gbs: bytes of K and V read plus q and o, over ms), and per pass a device-to-device copy
(torch_copy), the roof the bandwidth is read against. Metrics are registered into analysis.claims.METRICS.

Decoding is judged on the GPU's own time (gpu_ms: analysis.cells.JUDGED_ON, which the report's method
reads too): serving replays its decode steps in CUDA graphs, where the host's launch time does not show,
and a decode call is short enough that the wall-clock time of an eager call mostly measures the host. So
no decode cell is host-bound here; the host's time per call stays in decode.csv (host_ms).
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analysis.cells import JUDGED_ON, PAIR_KEYS, aggregate, describe_exclusions, eligible, exclusion_counts, select
from analysis.claims import NOT_MEASURED, metric, summarise_ratios
from analysis.load import attention_rows, ceiling_rows, measured

TIME = JUDGED_ON["decode"]  # the value every decode cell is judged on

PROVIDER_LABELS = {"ours": "Ours (Triton)", "sdpa": "SDPA (best backend)", "flex": "FlexAttention"}


def copy_bandwidth(frame: pd.DataFrame) -> float | None:
    """The copy roof measured beside the decode rows: median GB/s (bytes read plus written, over ms)."""
    copies = measured(ceiling_rows(frame))
    copies = copies[(copies["provider"] == "torch_copy") & (copies["mode"] == "copy")].dropna(subset=["ms"])
    if copies.empty:
        return None
    moved = copies["note"].map(lambda note: float(m.group(1)) if (m := re.search(r"bytes=(\d+)", note)) else float("nan"))
    rates = (moved / (copies["ms"] * 1e-3) / 1e9).dropna()
    return float(rates.median()) if not rates.empty else None


def _cells(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per cell (median GPU time over repetitions, noisy cells marked) with the bytes a call moves
    (moved_bytes) and its bandwidth, those bytes over that time."""
    from experiments.decode import moved_bytes

    cells = aggregate(attention_rows(frame), TIME, keys=["experiment", "provider", "variant"] + PAIR_KEYS)
    moved = [moved_bytes(int(c.batch), int(c.heads), int(c.kv_heads), int(c.seqlen_k), int(c.head_dim), c.dtype)
             if c.dtype in ("fp16", "bf16") and not pd.isna(c.batch) else float("nan") for c in cells.itertuples()]
    cells["moved_bytes"] = pd.Series(moved, index=cells.index, dtype=float)
    cells["bandwidth_gbs"] = cells["moved_bytes"] / (cells[TIME] * 1e-3) / 1e9
    return cells


def _shape(row) -> str:
    cache = int(row["seqlen_k"])
    cache_text = f"{cache // 1024}k" if cache % 1024 == 0 else str(cache)
    return f"B{int(row['batch'])} H{int(row['heads'])}/{int(row['kv_heads'])} cache {cache_text} {row['dtype']}"


def fixed_cost(cells: pd.DataFrame) -> tuple[float, float] | None:
    """A least-squares fit of the cells' GPU time over the bytes they move, time = fixed + bytes / rate: the
    fixed cost a call pays whatever its cache (us) and the rate it streams at (GB/s); None with fewer than two
    distinct sizes or a rate that does not come out positive."""
    cells = cells.dropna(subset=[TIME, "moved_bytes"])
    if cells["moved_bytes"].nunique() < 2:
        return None
    slope, intercept = np.polyfit(cells["moved_bytes"], cells[TIME] * 1e3, 1)  # us per byte, us
    return (float(intercept), float(1e-3 / slope)) if slope > 0 else None


def _other_caches(cells: pd.DataFrame, cell) -> pd.DataFrame:
    """The eligible cells of `cells` at `cell`'s batch, heads, dtype and head dim: its shape at every cache length."""
    same = eligible(cells)
    for key in ("batch", "heads", "kv_heads", "dtype", "head_dim"):
        same = same[same[key] == cell[key]]
    return same


@metric
def decode_bandwidth(frames, hardware, *, provider="ours", variant="dense", group=8, min_cache=8192, peer="sdpa",
                     target=0.70):
    """Achieved bandwidth of `provider`'s `variant` rows at GQA `group`:1 and caches >= `min_cache`, as a share
    of the copy bandwidth measured in the same file: min/median/max share, where the least, n cells. And why
    the least is least: at its batch and dtype, over every cache length, the GPU time fitted as a fixed cost
    plus bytes over a streaming rate (`fixed_cost`), for `provider` and for `peer` (fixed_us, stream_share,
    peer_fixed_us), and what a call at the least cell may spend beyond its reads at that rate to reach the
    `target` share of the copy bandwidth (spare_us: its bytes' time at the target less their time at the rate)."""
    values = {"n": 0, "min_share": None, "median_share": None, "max_share": None, "min_at": None,
              "best_gbs": None, "copy_gbs": None, "excluded": "no cell excluded", "host_bound": 0, "noisy": 0,
              "fixed_us": None, "stream_share": None, "peer_fixed_us": None, "spare_us": None}
    if "decode" not in frames:
        return values | {"missing": NOT_MEASURED.format("decode")}
    frame = frames["decode"]
    values["copy_gbs"] = copy_bandwidth(frame)
    every = _cells(frame)
    cells = select(every, {"provider": provider, "variant": variant})
    cells = cells[(cells["heads"] == cells["kv_heads"] * group) & (cells["seqlen_k"] >= min_cache)]
    values.update(excluded=describe_exclusions(cells), **exclusion_counts(cells))
    cells = eligible(cells)
    if cells.empty or values["copy_gbs"] is None:
        return values | {"n": 0, "missing": "no eligible decode cell or no copy row in decode.csv"}
    share = cells["bandwidth_gbs"] / values["copy_gbs"]
    worst = cells.loc[share.idxmin()]
    values |= {"n": len(cells), "min_share": float(share.min()), "median_share": float(share.median()),
               "max_share": float(share.max()), "min_at": _shape(worst),
               "best_gbs": float(cells["bandwidth_gbs"].max())}
    same = _other_caches(every, worst)
    if (fit := fixed_cost(select(same, {"provider": provider, "variant": variant}))) is not None:
        fixed, rate = fit
        moved = worst["moved_bytes"]
        values |= {"fixed_us": fixed, "stream_share": rate / values["copy_gbs"],
                   "spare_us": float(moved / (target * values["copy_gbs"] * 1e3) - moved / (rate * 1e3))}
    if (fit := fixed_cost(select(same, {"provider": peer}))) is not None:
        values["peer_fixed_us"] = fit[0]
    return values


def _ratios(frame, baseline: dict, candidate: dict, value: str = TIME) -> tuple[pd.DataFrame, pd.DataFrame]:
    """baseline time / candidate time (GPU time) at each shape where both have an eligible cell; and the cells left out."""
    cells = _cells(frame)
    arms = {}
    for name, arm in (("baseline", baseline), ("candidate", candidate)):
        arms[name] = select(cells, arm)
    left_out = pd.concat([arms["baseline"], arms["candidate"]], ignore_index=True)
    left_out = left_out[left_out["excluded"] != ""]
    both = eligible(arms["baseline"]).set_index(PAIR_KEYS)[[value]].merge(
        eligible(arms["candidate"]).set_index(PAIR_KEYS)[[value]], left_index=True, right_index=True,
        suffixes=("_baseline", "_candidate"))
    both["ratio"] = both[f"{value}_baseline"] / both[f"{value}_candidate"]
    return both.reset_index(), left_out


@metric
def decode_speedup(frames, hardware, *, candidate=None, baselines=None):
    """How many times faster `candidate` is than each baseline ({name: arm}) at the same shape: <name>_min,
    <name>_median, <name>_max, <name>_n, <name>_at_min (the shape where it is slowest)."""
    candidate = candidate or {"provider": "ours", "variant": "dense"}
    baselines = baselines or {"sdpa": {"provider": "sdpa"}, "flex": {"provider": "flex"}}
    values = {"n": 0, "excluded": "no cell excluded", "host_bound": 0, "noisy": 0}
    for name in baselines:
        values.update({f"{name}_{key}": None for key in ("min", "median", "max", "at_min")}, **{f"{name}_n": 0})
    if "decode" not in frames:
        return values | {"missing": NOT_MEASURED.format("decode")}
    left_out = []
    for name, arm in baselines.items():
        pairs, excluded = _ratios(frames["decode"], arm, candidate)
        left_out.append(excluded)
        if pairs.empty:
            continue
        ratios = summarise_ratios(pairs, {})
        values.update({f"{name}_{key}": ratios[key] for key in ("n", "min", "median", "max")},
                      **{f"{name}_at_min": _shape(pairs.loc[pairs["ratio"].idxmin()])})
        values["n"] += len(pairs)
    excluded = pd.concat(left_out, ignore_index=True)
    values.update(excluded=describe_exclusions(excluded), **exclusion_counts(excluded))
    return values


@metric
def decode_paged_overhead(frames, hardware, *, provider="ours"):
    """Paged over dense time of `provider` at each shape and page size: slowdown_min/median/max (paged ms /
    dense ms), where the most, and per page size the median. And at the most's batch and layout, over every
    cache length, both layouts' GPU time fitted as a fixed cost plus bytes over a streaming rate (`fixed_cost`):
    paged_fixed_us and dense_fixed_us, and paged_rate_share, the paged rate over the dense one (fit_at, the shape
    without its cache length; fit_variant, the paged layout)."""
    values = {"n": 0, "slowdown_min": None, "slowdown_median": None, "slowdown_max": None, "max_at": None,
              "by_page": "none", "excluded": "no cell excluded", "host_bound": 0, "noisy": 0,
              "paged_fixed_us": None, "dense_fixed_us": None, "paged_rate_share": None, "fit_at": None,
              "fit_variant": None}
    if "decode" not in frames:
        return values | {"missing": NOT_MEASURED.format("decode")}
    frame = frames["decode"]
    variants = sorted(v for v in set(frame["variant"]) if v.startswith("paged"))
    found, left_out, by_page = [], [], []
    for variant in variants:
        pairs, excluded = _ratios(frame, {"provider": provider, "variant": variant},
                                  {"provider": provider, "variant": "dense"})
        left_out.append(excluded)
        if pairs.empty:
            continue
        pairs["variant"] = variant
        found.append(pairs)
        by_page.append(f"page {variant.removeprefix('paged')}: {pairs['ratio'].median():.3f}x")
    if left_out:
        excluded = pd.concat(left_out, ignore_index=True)
        values.update(excluded=describe_exclusions(excluded), **exclusion_counts(excluded))
    if not found:
        return values | {"missing": "no paged and dense decode cells of one shape to compare"}
    pairs = pd.concat(found, ignore_index=True)
    worst = pairs.loc[pairs["ratio"].idxmax()]
    values |= {"n": len(pairs), "slowdown_min": float(pairs["ratio"].min()),
               "slowdown_median": float(pairs["ratio"].median()), "slowdown_max": float(pairs["ratio"].max()),
               "max_at": f"{_shape(worst)} {worst['variant']}", "by_page": "; ".join(by_page)}
    same = _other_caches(select(_cells(frame), {"provider": provider}), worst)
    paged = fixed_cost(same[same["variant"] == worst["variant"]])
    dense = fixed_cost(same[same["variant"] == "dense"])
    if paged is not None and dense is not None:
        values |= {"paged_fixed_us": paged[0], "dense_fixed_us": dense[0],
                   "paged_rate_share": paged[1] / dense[1], "fit_at": re.sub(r" cache \S+", "", _shape(worst)),
                   "fit_variant": worst["variant"]}
    return values


# ---------------------------------------------------------------- the report's table and figure

def facts(frames: dict[str, pd.DataFrame]) -> dict:
    """The report's decode table: per provider and layout, the median bandwidth at each cache length (GQA 8:1
    and MHA, fp16, the largest batch measured), or measured=False without decode.csv."""
    if "decode" not in frames:
        return {"measured": False, "rows": [], "copy_gbs": None}
    frame = frames["decode"]
    cells = eligible(_cells(frame))
    if (cells["dtype"] == "fp16").any():
        cells = cells[cells["dtype"] == "fp16"]
    rows = []
    for (provider, variant, heads, kv_heads, batch, dtype), group in cells.groupby(
            ["provider", "variant", "heads", "kv_heads", "batch", "dtype"], sort=True):
        for _, cell in group.sort_values("seqlen_k").iterrows():
            rows.append({"provider": PROVIDER_LABELS.get(provider, provider), "layout": variant,
                         "heads": f"{int(heads)}/{int(kv_heads)}", "batch": int(batch), "dtype": dtype,
                         "cache": int(cell["seqlen_k"]), "gbs": float(cell["bandwidth_gbs"])})
    return {"measured": True, "rows": rows, "copy_gbs": copy_bandwidth(frame)}


def draw(frames):
    """Achieved bandwidth against cache length, one line per provider and layout (one colour each across
    panels), a panel per batch (rows) and head layout (columns), fp16; the copy bandwidth as a dashed roof.
    Host-bound and noisy cells are left out, as in the verdicts."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    from analysis.figures import _empty

    if "decode" not in frames:
        return _empty("decode: not measured in the archived run yet")
    frame = frames["decode"]
    cells = eligible(_cells(frame))
    cells = cells[cells["dtype"] == "fp16"] if (cells["dtype"] == "fp16").any() else cells
    if cells.empty:
        return _empty("decode: no measured row")
    cells = cells.copy()
    cells["arm"] = [PROVIDER_LABELS.get(p, p) + ("" if v in ("dense", "default") else f", {v}")
                    for p, v in zip(cells["provider"], cells["variant"])]
    cells["TB/s"] = cells["bandwidth_gbs"] / 1e3
    arms = sorted(set(cells["arm"]), key=lambda arm: (not arm.startswith(PROVIDER_LABELS.get("ours", "ours")), arm))
    palette = dict(zip(arms, sns.color_palette("colorblind", len(arms))))
    roof = copy_bandwidth(frame)
    layouts = sorted(set(zip(cells["heads"], cells["kv_heads"])), key=lambda hk: hk[0] // hk[1], reverse=True)
    batches = sorted(set(cells["batch"].astype(int)))
    figure, axes = plt.subplots(len(batches), len(layouts), figsize=(5 * len(layouts), 2.6 * len(batches) + 0.8),
                                squeeze=False, sharey=True)
    for row, batch in enumerate(batches):
        for column, (heads, kv_heads) in enumerate(layouts):
            axis = axes[row, column]
            panel = cells[(cells["heads"] == heads) & (cells["kv_heads"] == kv_heads) & (cells["batch"] == batch)]
            if not panel.empty:
                sns.lineplot(data=panel, x="seqlen_k", y="TB/s", hue="arm", hue_order=arms, palette=palette,
                             marker="o", ax=axis, legend=False)
            if roof is not None:
                axis.axhline(roof / 1e3, color="grey", linestyle="--", linewidth=0.8)
            axis.set_xscale("log", base=2)
            axis.set_xlabel("cache length (keys)" if row == len(batches) - 1 else "")
            axis.set_ylabel("achieved bandwidth (TB/s)" if column == 0 else "")
            group = heads // kv_heads
            axis.set_title(f"{heads} q heads / {kv_heads} kv heads ({'MHA' if group == 1 else f'GQA {group}:1'}), "
                           f"batch {batch}", fontsize=8)
            axis.set_ylim(bottom=0)
    handles = [plt.Line2D([], [], color=palette[arm], marker="o", label=arm) for arm in arms]
    if roof is not None:
        handles.append(plt.Line2D([], [], color="grey", linestyle="--", label="copy (read + write)"))
    figure.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), fontsize=7, frameon=False)
    figure.tight_layout(rect=(0, 0.06, 1, 1))
    return figure
