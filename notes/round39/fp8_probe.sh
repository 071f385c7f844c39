#!/usr/bin/env bash
# On an H100 or H200, with carry .whl and .devstate (.devstate/next: `git archive` of the next tree at 0021 without
# notes/ and paper/published/, plus kernels/_hopper_v43.py and kernels/_hopper_v44.py, the kernels/_hopper.py of
# 3f48b13 and of 0020): the Hopper forward's GPU tests (fp8, rising scores, the compile check, pingpong, the
# reference tests), then notes/round39/fp8_probe.py in what is left (PROBE names another of this round's probes,
# as pingpong_probe.sh does).
#   TEST_SECONDS=100 PROBE_SECONDS=150 [HEAD_DIMS="128 256"] [PROBE=fp8_probe] bash notes/round39/fp8_probe.sh
set -uo pipefail
root=$PWD
[ -d .site/snakemake ] || python3 -m pip install -q --no-index --no-deps --no-compile --target .site .whl/*.whl
cd .devstate/next || exit 2
export PYTHONPATH=$root/.site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,memory.total --format=csv > "$OUT/device.txt"
if [ "${TEST_SECONDS:-100}" -gt 0 ]; then
  timeout "${TEST_SECONDS:-100}" python3 -m pytest -n "${WORKERS:-8}" -v -rfE -p no:cacheprovider --durations=10 \
    tests/test_fp8.py tests/test_hopper.py \
    -k "${TEST_K:-(hopper and (fp8 or sm90a or pingpong)) or rising or test_forward_matches_reference}" \
    > "$OUT/gpu_tests_fp8.log" 2>&1
  echo "tests rc $?"; grep -E "FAILED|ERROR|passed|failed" "$OUT/gpu_tests_fp8.log" | tail -15
fi
probe=${PROBE:-fp8_probe}
timeout "${PROBE_SECONDS:-150}" python3 "$root/notes/round39/$probe.py" "$OUT/$probe.csv" ${HEAD_DIMS:-} \
  > "$OUT/$probe.log" 2>&1
echo "probe rc $?"; tail -20 "$OUT/$probe.log"
