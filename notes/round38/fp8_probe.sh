#!/usr/bin/env bash
# On an H100 or H200, with carry .whl and .devstate (.devstate/next: `git archive` of the next tree without notes/
# and paper/published/, notes/round38/README.md): the next tree's fp8 GPU tests, the sm_90a compile check and the
# pingpong tests, then notes/round38/fp8_probe.py in what is left.
#   TEST_SECONDS=150 PROBE_SECONDS=300 [TEST_K="pytest -k expression"] [HEAD_DIMS="128 64"] \
#     bash notes/round38/fp8_probe.sh
set -uo pipefail
root=$PWD
[ -d .site/snakemake ] || python3 -m pip install -q --no-index --no-deps --no-compile --target .site .whl/*.whl
cd .devstate/next || exit 2
export PYTHONPATH=$root/.site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,memory.total --format=csv > "$OUT/device.txt"
if [ "${TEST_SECONDS:-150}" -gt 0 ]; then
  timeout "${TEST_SECONDS:-150}" python3 -m pytest -n "${WORKERS:-8}" -v -rfE -p no:cacheprovider --durations=10 \
    tests/test_fp8.py tests/test_hopper.py \
    tests/test_experiments.py -k "${TEST_K:-fp8 or sm90a or pingpong}" > "$OUT/gpu_tests_fp8.log" 2>&1
  echo "tests rc $?"; grep -E "FAILED|ERROR|passed|failed" "$OUT/gpu_tests_fp8.log" | tail -15
fi
timeout "${PROBE_SECONDS:-300}" python3 "$root/notes/round38/fp8_probe.py" "$OUT/fp8_probe.csv" ${HEAD_DIMS:-} \
  > "$OUT/fp8_probe.log" 2>&1
echo "probe rc $?"; tail -20 "$OUT/fp8_probe.log"
