#!/usr/bin/env bash
# One device call: the probe's head dim 128 forward+backward arms decide HOPPER_BACKWARD_FEATURES
# (notes/round22/backward_features.py), the tree takes the decision, and the GPU tests and the grid run at the
# commit made locally with the same decision (.devstate/variants.txt: "names commit" per line, "none" for none).
#   bash notes/round22/device_probe_then_grid.sh
set -uo pipefail
[ -d .site/snakemake ] || python3 -m pip install -q --no-index --no-deps --no-compile --target .site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/.site:$PWD PYTHONUNBUFFERED=1
# the decision and the archive are the H200's: on another GPU (the pool may give an H100) nothing runs
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$gpu" in *H200*) ;; *) echo "$gpu is not an H200: no probe, no decision, no grid"; exit 2;; esac
probe=$OUT/hopper_features_probe_d128_h200.csv
PROBE_HEAD_DIMS=128 PROBE_MODES=fwd_bwd PROBE_CHECKS=none timeout 240 python3 notes/round22/hopper_features_probe.py \
  > "$probe" 2> "$OUT/hopper_features_probe_d128_h200.err"
tail -8 "$probe"
for feature in window1024 softcap30 softcap30_causal; do
  grep -q "^fwd_bwd,128,$feature,16384,hopper," "$probe" || { echo "probe incomplete ($feature): no decision, no grid"; exit 3; }
done
names=$(python3 notes/round22/backward_features.py decide notes/round22/h200/hopper_features_probe_h200.csv "$probe")
commit=$(awk -v key="${names:-none}" '$1 == key {print $2}' .devstate/variants.txt)
echo "HOPPER_BACKWARD_FEATURES: ${names:-none} -> commit $commit" | tee "$OUT/decision.txt"
[ -n "$commit" ] || exit 4
python3 notes/round22/backward_features.py apply "$names" || exit 5
TESTS="${TESTS:-tests/test_hopper.py tests/test_kernels.py tests/test_features.py tests/test_features_ablation.py tests/test_varlen.py}" \
  WORKERS=${WORKERS:-15} TEST_SECONDS=${TEST_SECONDS:-360} BUDGET_SECONDS=$(( ${BUDGET_SECONDS:-565} - SECONDS )) \
  bash notes/h200_measure.sh "$commit" s1 results archive
