#!/usr/bin/env bash
# On an sm_90 GPU, from .devstate (notes/round28/make_trees.sh puts it there): feature_fwd_probe.py on v31's and
# v33's kernels (v32 and v33: ALiBi's two drafts), alternating, twice each; then v33's ALiBi tests.
set -u
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv > "$OUT/gpu.txt"
for i in 1 2; do for t in v31 v33; do
  (cd $t && PYTHONPATH=. timeout 150 python3 ../feature_fwd_probe.py $t >> "$OUT/feature_fwd_probe.csv" 2>> "$OUT/probe.err")
  echo "$t $i rc $?"
done; done
cd v33 && PYTHONPATH=. timeout "${TEST_SECONDS:-150}" python3 -m pytest -n 8 -q -rfE -p no:cacheprovider tests/test_hopper.py tests/test_features.py -k alibi > "$OUT/tests.log" 2>&1
echo "tests rc $?"; grep -v Benchmark "$OUT/tests.log" | tail -8
