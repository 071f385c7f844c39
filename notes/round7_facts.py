"""The numbers quoted in notes/perf.md's "v7" section, read from pipeline-written files.

    python3 notes/round7_facts.py > notes/round7_facts.txt

The speed ablation of branch next/round7 at f0119d2 (notes/round7_partial/speed.csv, from
`bash notes/h200_run.sh f0119d2... r7step1 results --resources gpu=1 --prioritize speed features`
on the lent one-GPU H200) beside the archive's (cc07b7d):
1. host time per call at seqlen 512 (host_ms, median over repetitions), ours and SDPA flash, and
   ours over SDPA flash, per head dim, mask and pass;
2. the spread of SDPA flash's own host time over those cells (how noisy the measure is);
3. ours' fp16 TFLOP/s at head dims 64 and 128, 16k tokens, new over old (kernels unchanged).
"""
import os
import sys

import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root
from analysis.claims import host_time_ratio  # noqa: E402

RUNS = {"archive cc07b7d": "results/archive/nvidia-h200/speed.csv",
        "next/round7 f0119d2": "notes/round7_partial/speed.csv"}
pd.set_option("display.width", 200)

speeds = {label: pd.read_csv(path) for label, path in RUNS.items()}
print("1. host ms per call at seqlen 512, fp16 (median over repetitions); ours / sdpa_flash")
for label, speed in speeds.items():
    cells = speed[(speed.seqlen_q == 512) & (speed.dtype == "fp16") & (speed.status == "ok")]
    host = cells.groupby(["mode", "head_dim", "causal", "provider"]).host_ms.median().unstack("provider")
    ratio = (host["ours"] / host["sdpa_flash"]).unstack("mode")
    print(f"\n{label}: ours / sdpa_flash host ms")
    print(ratio.round(2))
    # the ranges as the report's claim short_sequence_host_time computes them (analysis/claims.py)
    summary = host_time_ratio({"speed": speed}, {}, experiment="speed", baseline={"provider": "sdpa_flash"},
                              candidate={"provider": "ours"}, modes=["fwd", "fwd_bwd", "bwd"], seqlens=[512])
    print("range per pass (the claim's metric):",
          {mode: f"{summary[f'{mode}_min']:.2f}-{summary[f'{mode}_max']:.2f} (median {summary[f'{mode}_median']:.2f})"
           for mode in ("fwd", "fwd_bwd", "bwd")})
    print(f"{label}: host ms, ours and sdpa_flash")
    print(host[["ours", "sdpa_flash"]].unstack("mode").round(3))
    flash = host["sdpa_flash"].unstack("mode")
    print("2. sdpa_flash host ms range per pass:",
          {mode: f"{flash[mode].min():.3f}-{flash[mode].max():.3f}" for mode in flash.columns})

print("\n3. ours fp16 TFLOP/s at 16k tokens (median over repetitions), new / old")
keys = ["mode", "head_dim", "causal", "seqlen_q"]
tflops = {label: speed[(speed.provider == "ours") & (speed.dtype == "fp16") & (speed.status == "ok")]
          .groupby(keys).tflops.median() for label, speed in speeds.items()}
old, new = tflops.values()
print((new / old).describe().round(3))
