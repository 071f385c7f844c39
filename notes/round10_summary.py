"""Tables for notes/perf.md v10 from this session's H200 probe rows (no number typed by hand).

    .venv/bin/python notes/round10_summary.py > notes/round10_summary.txt

Reads notes/hopper_fwd_probe_h200.csv (notes/hopper_fwd_probe.py), notes/hopper_fwd_tiles_h200.csv
(notes/hopper_fwd_tiles.py) and notes/decode_split_rule_h200.csv (notes/decode_split_rule_probe.py).
Each cell is the median over the probe's passes; spread = (max - min) / median over passes.
"""
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
KEYS = ["mode", "head_dim", "causal", "seqlen"]


def hopper_forward() -> None:
    d = pd.read_csv(HERE / "hopper_fwd_probe_h200.csv")
    tf = d.groupby(KEYS + ["provider"]).tflops.median().unstack("provider")
    spread = d.groupby(KEYS + ["provider"]).tflops.agg(lambda x: (x.max() - x.min()) / x.median()).max()
    table = pd.DataFrame({"hopper": tf.hopper, "hopper_serial": tf.get("hopper_serial"), "ours (portable)": tf.ours,
                          "cuDNN": tf.sdpa_cudnn, "SDPA flash": tf.sdpa_flash,
                          "hopper / cuDNN": tf.hopper / tf.sdpa_cudnn, "hopper / ours": tf.hopper / tf.ours,
                          "hopper / SDPA flash": tf.hopper / tf.sdpa_flash,
                          "overlap / serial": tf.hopper / tf.get("hopper_serial")})
    print("## Hopper forward against the portable forward, cuDNN and SDPA flash (TFLOP/s, fp16, 16k tokens)")
    print(f"SM clock over the rows: {d.sm_clock_mhz.min()}-{d.sm_clock_mhz.max()} MHz; largest spread over passes "
          f"of any cell: {spread:.1%}")
    print(table.round(2).to_string())
    for mode in ("fwd", "fwd_bwd"):
        r = table.loc[mode, "hopper / cuDNN"]
        long = table.loc[mode].query("seqlen >= 2048")["hopper / cuDNN"]
        print(f"{mode}: hopper / cuDNN {r.min():.2f}-{r.max():.2f} (median {r.median():.2f}); at seqlen >= 2k, "
              f"cells >= 1.0: {int((long >= 1.0).sum())} of {len(long)}")
    print()


def hopper_tiles() -> None:
    d = pd.read_csv(HERE / "hopper_fwd_tiles_h200.csv")
    print("## Hopper forward tiles (TFLOP/s; block_n 0 = cuDNN); every config passed its float64 check:",
          bool(d[d.block_n > 0].ok.all()))
    t = d.groupby(["head_dim", "causal", "seqlen", "block_n", "stages"]).tflops.median().unstack(["block_n", "stages"])
    print(t.round(0).to_string())
    print()


def decode_rule() -> None:
    d = pd.read_csv(HERE / "decode_split_rule_h200.csv")
    keys = ["dtype", "batch", "heads", "kv_heads", "seqlen_k"]
    ms = d.groupby(keys + ["layout", "fn"]).ms.median().unstack("fn").reset_index()
    sdpa = d[~d.fn.str.startswith("ours")].groupby(keys).ms.median()
    ms["sdpa"] = ms.set_index(keys).index.map(sdpa)
    splits = d.groupby(["batch", "heads", "kv_heads", "seqlen_k", "fn"]).num_splits.first().unstack("fn")
    ms = ms.merge(splits.reset_index(), on=["batch", "heads", "kv_heads", "seqlen_k"], suffixes=("", "_splits"))
    changed = ms[(ms.ours_auto_splits != ms.ours_pow2_splits) & (ms.seqlen_k >= 32768)]
    print("## Decoding's split count: the power-of-two rule against today's automatic choice")
    print("Cells of 32k keys or more where the rule changes the count (medians of the passes, ms):")
    cols = changed.assign(auto_over_rule=changed.ours_auto / changed.ours_pow2,
                          sdpa_over_rule=changed.sdpa / changed.ours_pow2)
    print(cols[keys + ["layout", "ours_auto_splits", "ours_pow2_splits", "ours_auto", "ours_pow2", "auto_over_rule",
                       "sdpa_over_rule"]].round(3).to_string(index=False))
    same = ms[(ms.ours_auto_splits == ms.ours_pow2_splits) & (ms.seqlen_k >= 8192)]
    ratio = same.ours_auto / same.ours_pow2
    print(f"Cells of 8k keys or more where the count is the same: auto / rule {ratio.min():.3f}-{ratio.max():.3f} "
          f"(same launches: run-to-run noise), {len(same)} cells")
    dense = ms[ms.layout == "dense"].set_index(keys).ours_pow2
    for layout in ("paged16", "paged256"):
        paged = ms[(ms.layout == layout) & (ms.seqlen_k >= 32768)].set_index(keys).ours_pow2
        r = (paged / dense.reindex(paged.index)).dropna()
        print(f"{layout} over dense with the rule, 32k keys or more: {r.min():.3f}-{r.max():.3f} (median {r.median():.3f})")


if __name__ == "__main__":
    hopper_forward()
    hopper_tiles()
    decode_rule()
