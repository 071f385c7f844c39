#!/usr/bin/env bash
# On an sm_90 GPU: the GPU tests of the next grid's tree (main + round 27's 0001, 0002 + round 28's 0003-0005:
# v28, v29, v31, v32, v33) in .devstate/next, for the code those patches change.
set -u
cd "$(dirname "$0")/next"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total --format=csv > "$OUT/gpu.txt"
timeout "${TEST_SECONDS:-280}" python3 -m pytest -n 8 -q -rfE -p no:cacheprovider --durations=10 tests/test_hopper.py \
  tests/test_features.py tests/test_decode.py tests/test_exclusive_gpu_memory.py > "$OUT/gpu_tests_next33.log" 2>&1
echo "tests rc $?"; grep -v "Benchmark\|warner(" "$OUT/gpu_tests_next33.log" | tail -15
