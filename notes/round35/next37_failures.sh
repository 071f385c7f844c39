#!/usr/bin/env bash
# On any GPU (an H100 will do), with carry .whl and .devstate: the next tree's (.devstate/next37) whole GPU test
# suite, the files the next tree changed first, verbose, within TEST_SECONDS; then each test that failed is run
# again alone (one process, -rfE: the summary carries each error) in what is left of CALL_SECONDS.
#   TEST_SECONDS=400 CALL_SECONDS=570 bash notes/round35/next37_failures.sh
# FIRST (the files to run first) overrides that list: notes/round36/next37_rest.sh names the files round 36's run
# did not reach; with FIRST_ONLY=1 nothing else runs.
set -uo pipefail
first=${FIRST:-"tests/test_hopper.py tests/test_decode.py tests/test_experiments.py tests/test_launch.py tests/test_sm90_compile.py tests/test_analysis.py"}
rest=$(cd .devstate/next37 && ls tests/test_*.py | grep -vxF -f <(tr ' ' '\n' <<<"$first") | tr '\n' ' ')
[ "${FIRST_ONLY:-0}" = 1 ] && rest=""  # only the tests FIRST names (notes/round37/next37_last.sh)
TESTS="$first $rest" TEST_SECONDS=${TEST_SECONDS:-400} DECODE_SECONDS=0 SPEED_SECONDS=0 \
  bash notes/round32/next37_probe.sh
mv "$OUT/gpu_tests_next37.log" "$OUT/gpu_tests_next37_all.log"
grep -oE '(FAILED|ERROR) tests/[^ ]*' "$OUT/gpu_tests_next37_all.log" | sed -E 's/^(FAILED|ERROR) //' | sort -u > "$OUT/failed.txt"
echo "$(wc -l < "$OUT/failed.txt") failed:"; cat "$OUT/failed.txt"
left=$(( ${CALL_SECONDS:-570} - SECONDS - 10 ))
if [ -s "$OUT/failed.txt" ] && [ "$left" -gt 30 ]; then
  # through next37_probe.sh again, so the rerun has the same wheels (.site) and PYTHONPATH as the first run
  WORKERS=0 TESTS="$(head -12 "$OUT/failed.txt" | tr '\n' ' ')" TEST_SECONDS=$left DECODE_SECONDS=0 SPEED_SECONDS=0 \
    bash notes/round32/next37_probe.sh
  mv "$OUT/gpu_tests_next37.log" "$OUT/failed_again.log"
fi
