#!/usr/bin/env bash
# On an H100 or H200, with carry .whl and .devstate (.devstate/next: `git archive` of the next tree at 0022 without
# notes/ and paper/published/, plus kernels/_hopper_v43.py, 3f48b13's kernels/_hopper.py): the GPU tests 0022 changed,
# then notes/round39/pingpong_probe.py.
#   TEST_SECONDS=60 PROBE_SECONDS=150 bash notes/round39/pingpong_probe.sh
set -uo pipefail
root=$PWD
[ -d .site/snakemake ] || python3 -m pip install -q --no-index --no-deps --no-compile --target .site .whl/*.whl
cd .devstate/next || exit 2
export PYTHONPATH=$root/.site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,memory.total --format=csv > "$OUT/device.txt"
if [ "${TEST_SECONDS:-60}" -gt 0 ]; then
  timeout "${TEST_SECONDS:-60}" python3 -m pytest -n "${WORKERS:-8}" -v -rfE -p no:cacheprovider \
    tests/test_fp8.py tests/test_hopper.py -k "rising or refuses_hopper" > "$OUT/gpu_tests.log" 2>&1
  echo "tests rc $?"; grep -E "FAILED|ERROR|passed|failed" "$OUT/gpu_tests.log" | tail -15
fi
timeout "${PROBE_SECONDS:-150}" python3 "$root/notes/round39/pingpong_probe.py" "$OUT/pingpong_probe.csv" \
  > "$OUT/pingpong_probe.log" 2>&1
echo "probe rc $?"; tail -10 "$OUT/pingpong_probe.log"
