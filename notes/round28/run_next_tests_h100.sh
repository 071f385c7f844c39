#!/usr/bin/env bash
# On an sm_90 GPU: the GPU tests of the next grid's tree (main + round 27's 0001, 0002 + round 28's 0003) in .devstate/next.
set -u
cd "$(dirname "$0")/next"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total --format=csv > "$OUT/gpu.txt"
timeout "${TEST_SECONDS:-420}" python3 -m pytest -n 8 -q -rfE -p no:cacheprovider --durations=10 tests/test_hopper.py \
  tests/test_kernels.py tests/test_features.py tests/test_varlen.py tests/test_launch.py tests/test_decode.py \
  tests/test_flash_attn_api.py tests/test_exclusive_gpu_memory.py > "$OUT/gpu_tests_next.log" 2>&1
echo "tests rc $?"; grep -v "Benchmark\|warner(" "$OUT/gpu_tests_next.log" | tail -25
