#!/usr/bin/env bash
# On any GPU (an H100 will do), with carry .whl and .devstate: the next tree's (.devstate/next37) whole GPU test suite
# within TEST_SECONDS (verbose, so a run cut at its limit still names each test and its outcome), then
# notes/round32/next37_probe.sh's decode probe and 512-token speed runs in what is left.
#   TEST_SECONDS=330 CALL_SECONDS=580 bash notes/round34/next37_gpu.sh
set -uo pipefail
root=$PWD
[ -d .site/snakemake ] || python3 -m pip install -q --no-index --no-deps --no-compile --target .site .whl/*.whl
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv | tee "$OUT/device.txt"
( cd .devstate/next37 && PYTHONPATH=$root/.site:$PWD timeout "${TEST_SECONDS:-330}" python3 -m pytest -n 8 -v -rfE \
    -p no:cacheprovider --durations=15 tests > "$OUT/gpu_tests_next37_all.log" 2>&1; echo "all tests rc $?" )
tail -15 "$OUT/gpu_tests_next37_all.log"
end=${CALL_SECONDS:-580}
left=$(( end - SECONDS ))
if [ "$left" -gt 80 ]; then
  d=$(( (left - 20) / 2 ))
  TEST_SECONDS=0 DECODE_SECONDS=$d SPEED_SECONDS=$d bash notes/round32/next37_probe.sh
fi
