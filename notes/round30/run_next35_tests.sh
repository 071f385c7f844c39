#!/usr/bin/env bash
# On an sm_90 GPU: the GPU tests of the next grid's tree with round 30's 0007 and 0008 (three consumer warpgroups
# at head dim 64 by default), from .devstate/next35 (`git archive` of kernels, tests, experiments, analysis,
# pyproject.toml).
set -u
cd "$(dirname "$0")/next35"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv > "$OUT/gpu.txt"
timeout "${TEST_SECONDS:-280}" python3 -m pytest -n 8 -q -rfE -p no:cacheprovider --durations=5 tests/test_hopper.py \
  tests/test_features.py tests/test_flash_attn_api.py > "$OUT/gpu_tests_next35.log" 2>&1
echo "tests rc $?"; grep -v "Benchmark\|warner(" "$OUT/gpu_tests_next35.log" | tail -12
