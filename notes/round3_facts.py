"""The numbers quoted in notes/perf.md's "v3" section (round 3: training features, varlen, decoding,
end-to-end training), read from the archived H200 run and the files the pipeline wrote from it.

    python notes/round3_facts.py [ARCHIVE_DIR] [VERDICTS_JSON] [OLD_SPEED_CSV]

ARCHIVE_DIR defaults to results/archive/nvidia-h200; VERDICTS_JSON to analysis/build/verdicts.json
(written by `snakemake --cores 1 publish --config mode=archive accuracy_on_cpu=false`); OLD_SPEED_CSV
(optional) is the previous archive's speed.csv (git show 46cb153:results/archive/nvidia-h200/speed.csv, the archive of run 8a76e86),
for the host time per call before and after.
"""
import json
import sys

import pandas as pd

archive = sys.argv[1] if len(sys.argv) > 1 else "results/archive/nvidia-h200"
verdicts_path = sys.argv[2] if len(sys.argv) > 2 else "analysis/build/verdicts.json"

train = pd.read_csv(f"{archive}/training.csv")
train = train[train["mode"] == "train"]
ok = train[train.status == "ok"]
table = ok.groupby(["variant", "seqlen_q", "provider", "batch"]).agg(
    tflops=("tflops", "median"), ms=("ms", "median"), reps=("ms", "size")).round(1)
print("training, model TFLOP/s per GPU (median over passes):")
print(table.to_string())
print("training oom:", sorted({(v, int(n), p, int(b)) for v, n, p, b in
                              train[train.status == "oom"][["variant", "seqlen_q", "provider", "batch"]].itertuples(index=False)}))
compiled = ok[ok.variant.str.endswith("+compile")]
print("compiled warm-up notes:", list(compiled.note))

with open(verdicts_path) as f:
    verdicts = json.load(f)
records = verdicts if isinstance(verdicts, list) else verdicts.get("claims", verdicts)
for record in (records.values() if isinstance(records, dict) else records):
    if record["id"].startswith(("features", "decode", "training")):
        print(f"{record['id']}: {record['verdict']}: {record['finding']}")

if len(sys.argv) > 3:
    for label, path in (("before", sys.argv[3]), ("after", f"{archive}/speed.csv")):
        speed = pd.read_csv(path)
        cells = speed[(speed.provider.isin(["ours", "sdpa_flash"])) & (speed.seqlen_q == 512) & (speed.head_dim == 128)
                      & (speed.causal == 0) & (speed.status == "ok")]
        print(f"host and GPU ms per call at seqlen 512, d128, non-causal ({label}):")
        print(cells.groupby(["provider", "mode"])[["ms", "gpu_ms", "host_ms"]].median().round(3).to_string())
