#!/usr/bin/env bash
# One device call for the v25 + v26 tree (10b3c64 + patches 0001 and 0002, committed), before its grid: GPU tests,
# the dropout probe on this tree and on 10b3c64's kernels (.devstate/base), and the H200's head dim 128
# forward+backward feature probe (which decides whether ALiBi's d128 forward default stands).
#   git archive 10b3c64 kernels | tar x -C .devstate/base        (once, here; mkdir -p .devstate/base first)
#   bash notes/round24/probe_v25_v26.sh                         (carry .whl and .devstate; on an H200 or H100)
# The outputs are named by the GPU (h200, h100). On an H100 the feature probe is skipped (round 22 ran it there)
# and the GPU tests also cover the flash-attn API and varlen files. PARTS (default "tests dropout features") picks
# what runs, e.g. PARTS=features for the feature probe alone.
set -uo pipefail
PARTS=" ${PARTS:-tests dropout features} "
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
tests="tests/test_features.py tests/test_features_ablation.py tests/test_hopper.py"
case "$gpu" in
  *H200*) tag=h200 ;;
  *H100*) tag=h100; tests="$tests tests/test_flash_attn_api.py tests/test_varlen.py" ;;
  *) echo "not an H200 or H100 ($gpu): no probe"; exit 2 ;;
esac
[ -d .site/snakemake ] || python3 -m pip install -q --no-index --no-deps --no-compile --target .site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/.site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv > "$OUT/probe-gpu-$tag.txt"
if [[ "$PARTS" == *" tests "* ]]; then
timeout "${TEST_SECONDS:-240}" python3 -m pytest -n "${WORKERS:-14}" -q -rfE -p no:cacheprovider \
  $tests > "$OUT/tests_v25_v26_$tag.log" 2>&1
echo "tests rc $?"; tail -4 "$OUT/tests_v25_v26_$tag.log"
fi
if [[ "$PARTS" == *" dropout "* ]]; then
timeout 150 python3 notes/round24/dropout_probe.py > "$OUT/dropout_probe_v26_$tag.csv" 2> "$OUT/dropout_probe_v26_$tag.err"
echo "dropout probe (this tree) rc $?"
here=$PWD
(cd .devstate/base && PYTHONPATH=$here/.site:$PWD timeout 150 python3 "$here/notes/round24/dropout_probe.py" \
  > "$OUT/dropout_probe_10b3c64_$tag.csv" 2> "$OUT/dropout_probe_10b3c64_$tag.err")
echo "dropout probe (10b3c64's kernels) rc $?"
paste -d, "$OUT/dropout_probe_10b3c64_$tag.csv" "$OUT/dropout_probe_v26_$tag.csv" | head -50
fi
[ "$tag" = h200 ] && [[ "$PARTS" == *" features "* ]] || exit 0
PROBE_HEAD_DIMS=128 PROBE_MODES=fwd_bwd PROBE_CHECKS=none timeout "${PROBE_SECONDS:-200}" \
  python3 notes/round22/hopper_features_probe.py > "$OUT/hopper_features_probe_d128_fwd_bwd_$tag.csv" \
  2> "$OUT/hopper_features_probe_d128_fwd_bwd_$tag.err"
echo "feature probe rc $?"; tail -5 "$OUT/hopper_features_probe_d128_fwd_bwd_$tag.csv"
