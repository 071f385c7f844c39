"""The numbers quoted in notes/perf.md's "v2 re-measured with the round-2 method" section.

    python notes/round2_facts.py [ARCHIVE_DIR] [COMPARE_CSV]

ARCHIVE_DIR defaults to results/archive/nvidia-h200; COMPARE_CSV (optional) is the compare.csv that
`python -m analysis.compare <v2 archive> <this archive> --out DIR` wrote, for the per-provider ratios.
"""
import sys

import pandas as pd

archive = sys.argv[1] if len(sys.argv) > 1 else "results/archive/nvidia-h200"
speed = pd.read_csv(f"{archive}/speed.csv")
ok = speed[speed.status == "ok"]
attention = ok[ok.provider != "torch_matmul"]
print(f"host-bound speed rows: {int(speed.host_bound.sum())} of {len(speed)}, at seqlens "
      f"{sorted(speed[speed.host_bound == 1].seqlen_q.dropna().astype(int).unique())}")
print(f"SM clock over speed rows: median {ok.sm_clock_mhz.median():.0f} MHz, 10th-90th percentile "
      f"{ok.sm_clock_mhz.quantile(0.1):.0f}-{ok.sm_clock_mhz.quantile(0.9):.0f} MHz")
d256 = attention[(attention.head_dim == 256) & (attention.causal == 0) & (attention.seqlen_q == 16384)]
print("d256 n16k non-causal TFLOP/s (median over repetitions):")
print(d256.groupby(["provider", "mode"]).tflops.median().unstack().round(0).to_string())

seqlen = pd.read_csv(f"{archive}/seqlen.csv")
ours = seqlen[(seqlen.status == "ok") & (seqlen.provider == "ours") & (seqlen["mode"] == "fwd_bwd")]
for variant, group in ours.groupby("variant"):
    shortest = group[group.seqlen_q == group.seqlen_q.min()]
    ratio = (shortest.peak_mem_bytes / (2 * shortest.input_bytes)).max()  # q,k,v,dO + out,dq,dk,dv
    print(f"{variant}: ours fwd_bwd total memory at N={int(shortest.seqlen_q.iloc[0])} = {ratio:.3f}x "
          "of q, k, v, dO, out, dq, dk, dv")

fa = pd.read_csv(f"{archive}/fa1_vs_fa2.csv")
fa = fa[(fa.status == "ok") & (fa.provider == "ours")]
cells = fa.groupby(["variant", "mode", "head_dim", "causal", "seqlen_q"]).ms.median().unstack("variant")
ratio = (cells["fa1"] / cells["fa2"]).dropna()
print("faithful FA1 / FA2 time, by mode (min, median, max over shapes):")
print(ratio.groupby(level="mode").agg(["min", "median", "max"]).round(2).to_string())
noseq = (cells["fa1"] / cells["fa1_no_seqpar"]).dropna()
print("faithful FA1 / FA2-without-sequence-parallelism time, forward at 16k:",
      noseq.xs(("fwd", 16384), level=("mode", "seqlen_q")).round(1).to_dict())

if len(sys.argv) > 2:
    compared = pd.read_csv(sys.argv[2])
    compared = compared[compared.experiment == "speed"]
    print("speed, candidate/baseline median time by provider (median over cells):")
    print(compared.groupby("provider").ratio.median().round(3).to_string())
