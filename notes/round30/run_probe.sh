#!/usr/bin/env bash
# On an sm_90 GPU, from .devstate/next34 (`git archive` of the next grid's tree with round 30's 0006 and 0007:
# kernels, tests, experiments, analysis): the consumers and dropout probe, then the GPU tests of what 0006 and 0007
# change. Outputs under $OUT.
set -u
cd "$(dirname "$0")/next34"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv > "$OUT/gpu.txt"
timeout "${PROBE_SECONDS:-200}" python3 notes/round30/consumers_probe.py > "$OUT/consumers_probe.csv" 2> "$OUT/consumers_probe.err"
echo "probe rc $?"; tail -3 "$OUT/consumers_probe.err"
timeout "${TEST_SECONDS:-150}" python3 -m pytest -n 8 -q -rfE -p no:cacheprovider tests/test_hopper.py \
  tests/test_features.py -k "consumer or dropout or atomic" > "$OUT/gpu_tests_0006_0007.log" 2>&1
echo "tests rc $?"; tail -5 "$OUT/gpu_tests_0006_0007.log"
