#!/usr/bin/env bash
# One device call of this round: the decode host-time profile (before/after, notes/round23/decode_host_profile.py),
# then on an H200 the round-22 probe, decision, GPU tests (the launch and decode tests added) and the grid's start
# (notes/round22/device_probe_then_grid.sh); on another GPU, the GPU tests of the launch and decode changes alone.
#   bash notes/round23/device_call.sh        (carry .whl and .devstate; .devstate/_decode_before.py from git show)
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
tag=$(case "$gpu" in *H200*) echo h200;; *H100*) echo h100;; *) echo gpu;; esac)
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv > "$OUT/gpu_$tag.txt"
timeout 90 python3 notes/round23/decode_host_profile.py .devstate/_decode_before.py \
  > "$OUT/decode_host_profile_$tag.csv" 2> "$OUT/decode_host_profile_$tag.err"
cat "$OUT/decode_host_profile_$tag.csv"
if [ "$tag" = h200 ]; then
  TESTS="tests/test_hopper.py tests/test_kernels.py tests/test_features.py tests/test_features_ablation.py tests/test_varlen.py tests/test_launch.py tests/test_decode.py" \
    TEST_SECONDS=300 BUDGET_SECONDS=$(( 520 - SECONDS )) bash notes/round22/device_probe_then_grid.sh
else
  timeout 300 python3 -m pytest -n 8 -q -rfE -p no:cacheprovider tests/test_launch.py tests/test_decode.py \
    tests/test_flash_attn_api.py > "$OUT/gpu_tests_$tag.log" 2>&1
  echo "tests rc $?"; tail -8 "$OUT/gpu_tests_$tag.log"
fi
