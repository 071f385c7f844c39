"""The `features` ablation's comparisons (experiments/features.py): which arm is set against which.

Each comparison is a feature's arm of ours (the candidate) against a peer (the baseline), paired on the
shape and mode like every other claim (analysis/cells.py: medians over repetitions, host-bound and noisy
cells left out). Arms are named by feature family, not by parameter ("window1024" is a window arm), so the
config's values may change without touching the claims. A ratio is the peer's time over ours.
"""
from __future__ import annotations

import pandas as pd

from analysis.cells import PAIR_KEYS, describe_exclusions, exclusion_counts, paired
from analysis.claims import summarise_ratios
from analysis.load import attention_rows
from experiments import flops

OURS = "ours"
# name -> (feature, baseline arm, candidate arm, the baseline in words)
COMPARISONS = {
    "window_vs_causal": ("window", {"provider": OURS, "feature": "plain"}, {"provider": OURS, "feature": "window"},
                         "ours, full causal"),
    "window_vs_flex": ("window", {"provider": "flex", "feature": "window"}, {"provider": OURS, "feature": "window"},
                       "FlexAttention, sliding-window block mask"),
    "softcap_vs_flex": ("softcap", {"provider": "flex", "feature": "softcap"},
                        {"provider": OURS, "feature": "softcap"}, "FlexAttention, score_mod"),
    "softcap_vs_plain": ("softcap", {"provider": OURS, "feature": "plain"}, {"provider": OURS, "feature": "softcap"},
                         "ours without the feature"),
    "alibi_vs_flex": ("alibi", {"provider": "flex", "feature": "alibi"}, {"provider": OURS, "feature": "alibi"},
                      "FlexAttention, score_mod"),
    "alibi_vs_plain": ("alibi", {"provider": OURS, "feature": "plain"}, {"provider": OURS, "feature": "alibi"},
                       "ours without the feature"),
    "dropout_vs_sdpa": ("dropout", {"provider": "sdpa_flash", "feature": "dropout"},
                        {"provider": OURS, "feature": "dropout"}, "FlashAttention-2 CUDA (SDPA flash)"),
    "dropout_atomic_dq_vs_sdpa": ("dropout", {"provider": "sdpa_flash", "feature": "dropout"},
                                  {"provider": OURS, "feature": "dropout_atomic_dq"},
                                  "FlashAttention-2 CUDA (SDPA flash); ours with atomic_dq=True"),
    "dropout_vs_plain": ("dropout", {"provider": OURS, "feature": "plain"}, {"provider": OURS, "feature": "dropout"},
                         "ours without the feature"),
    "varlen_vs_padded": ("varlen", {"provider": OURS, "feature": "padded"}, {"provider": OURS, "feature": "varlen"},
                         "ours, padded dense batch"),
    "varlen_vs_flex": ("varlen", {"provider": "flex", "feature": "varlen"}, {"provider": OURS, "feature": "varlen"},
                       "FlexAttention, document mask"),
}
FEATURE_TITLES = {"window": "sliding window", "softcap": "softcap", "alibi": "ALiBi", "dropout": "dropout",
                  "varlen": "variable length"}


def feature_of(variant: str) -> str:
    """"window1024" -> "window" (experiments/features.py's rule, restated: the analysis runs without torch)."""
    return variant.rstrip("0123456789.")


def with_features(frame: pd.DataFrame) -> pd.DataFrame:
    """The attention rows of features.csv with a `feature` column (the variant's family)."""
    frame = attention_rows(frame)
    return frame.assign(feature=[feature_of(v) for v in frame["variant"]])


def compare(frame: pd.DataFrame, name: str, mode: str, dtype: str = "fp16") -> tuple[pd.DataFrame, pd.DataFrame]:
    """The pairs of comparison `name` in `mode` (ratio = baseline ms / ours ms, per shape) and the cells left
    out; `frame` from with_features."""
    _, baseline, candidate, _ = COMPARISONS[name]
    rows = frame[(frame["mode"] == mode) & (frame["dtype"] == dtype)]
    return paired(rows, baseline, candidate, "ms", PAIR_KEYS)


def shape_label(row) -> str:
    """"16k causal", "64 seqs <=7.6k full": a shape on the figure's axis and in findings."""
    n = int(row["seqlen_k"])
    length = f"{n // 1024}k" if n % 1024 == 0 else f"{n / 1024:.1f}k"
    mask = "causal" if int(row["causal"]) else "full"
    return f"{int(row['batch'])} seqs, up to {length}, {mask}" if row.get("varlen", False) else f"{length} {mask}"


def all_pairs(frame: pd.DataFrame, modes, dtype: str = "fp16") -> pd.DataFrame:
    """Every comparison's pairs in each of `modes`, with columns comparison, feature, against and shape."""
    found = []
    for mode in modes:
        for name, (feature, _, _, words) in COMPARISONS.items():
            pairs = compare(frame, name, mode, dtype)[0]
            if not pairs.empty:
                pairs = pairs.assign(comparison=name, feature=feature, against=words, varlen=feature == "varlen")
                pairs["shape"] = [shape_label(row) for _, row in pairs.iterrows()]
                found.append(pairs)
    return pd.concat(found, ignore_index=True) if found else pd.DataFrame()


def summary(frame: pd.DataFrame, comparisons, modes, dtype: str = "fp16", settings: dict | None = None) -> dict:
    """The values of a features claim: for each comparison, <name>_n, _min, _median, _max, _at_longest (median
    at the longest sequence) and _worst_at (the shape of the min), in the first of `modes` where the first
    comparison has pairs; <name>_other, the medians in the other modes, in words; n, the pairs of all of them."""
    frame = with_features(frame)
    chosen = modes[0]
    for mode in modes:
        if not compare(frame, comparisons[0], mode, dtype)[0].empty:
            chosen = mode
            break
    values, left_out = {"mode": chosen, "n": 0}, []
    for name in comparisons:
        pairs, excluded = compare(frame, name, chosen, dtype)
        left_out.append(excluded)
        ratios = summarise_ratios(pairs, {})
        values.update({f"{name}_{key}": ratios[key] for key in ("n", "min", "median", "max", "at_longest")})
        values["n"] += len(pairs)
        values[f"{name}_worst_at"] = ("not measured" if pairs.empty else
                                      shape_label(dict(pairs.loc[pairs["ratio"].idxmin()], varlen=name.startswith("varlen"))))
        other = []
        for mode in modes:
            if mode != chosen:
                pairs = compare(frame, name, mode, dtype)[0]
                if not pairs.empty:
                    other.append(f"{mode} median {pairs['ratio'].median():.2f}x over {len(pairs)} shapes")
        values[f"{name}_other"] = "; ".join(other) or "no other mode measured"
    excluded = pd.concat(left_out, ignore_index=True)
    values.update(excluded=describe_exclusions(excluded, settings), **exclusion_counts(excluded))
    if "window_vs_causal" in comparisons:
        values.update(window_bounds(frame, chosen, dtype))
    return values


def window_bound(seqlen: int, window: int, block_m: int, block_n: int) -> tuple[float, float]:
    """How many times a causal window's work full causal attention over seqlen x seqlen has (each query of the
    window sees itself and the `window` - 1 keys before it): in visible entries, and in the
    block_m x block_n tiles that a kernel skipping every tile wholly outside the mask still visits (the ones
    the diagonal or the window's edge cuts count whole)."""
    entries = flops.visible_pairs(seqlen, seqlen, True) / flops.visible_pairs(seqlen, seqlen, True, (window - 1, 0))
    causal_tiles = window_tiles = 0
    for first in range(0, seqlen, block_m):
        last = min(first + block_m, seqlen) - 1  # the row block's rows first..last see keys up to `last`
        causal_tiles += last // block_n + 1
        window_tiles += last // block_n - max(first - window + 1, 0) // block_n + 1
    return entries, causal_tiles / window_tiles


def window_bounds(frame: pd.DataFrame, mode: str, dtype: str = "fp16") -> dict:
    """window_bound at the longest window cell of ours in `mode` (the window from its variant, the tiles its rows
    record): window_entry_bound, window_tile_bound, window_tiles ("128 x 128"); None where there is no such row."""
    rows = with_features(frame)
    rows = rows[(rows["provider"] == OURS) & (rows["feature"] == "window") & (rows["mode"] == mode)
                & (rows["dtype"] == dtype)].dropna(subset=["seqlen_k", "block_m", "block_n"])
    if rows.empty:
        return {"window_entry_bound": None, "window_tile_bound": None, "window_tiles": None}
    row = rows.loc[rows["seqlen_k"].idxmax()]
    block_m, block_n = int(row["block_m"]), int(row["block_n"])
    entries, tiles = window_bound(int(row["seqlen_k"]), int(row["variant"].removeprefix("window")), block_m, block_n)
    return {"window_entry_bound": entries, "window_tile_bound": tiles, "window_tiles": f"{block_m} x {block_n}"}


def table(frame: pd.DataFrame, modes=("fwd_bwd", "fwd"), dtype: str = "fp16") -> list[dict]:
    """One line per comparison: the feature, the peer, and the median and range of our speedup in each mode."""
    frame = with_features(frame)
    lines = []
    for name, (feature, _, _, words) in COMPARISONS.items():
        line = {"feature": FEATURE_TITLES[feature], "against": words, "modes": {}}
        for mode in modes:
            pairs = compare(frame, name, mode, dtype)[0]
            line["modes"][mode] = (f"{pairs['ratio'].median():.2f}x ({pairs['ratio'].min():.2f}-"
                                   f"{pairs['ratio'].max():.2f}, {len(pairs)})" if not pairs.empty else "-")
        lines.append(line)
    return lines
