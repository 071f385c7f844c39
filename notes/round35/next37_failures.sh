#!/usr/bin/env bash
# On any GPU (an H100 will do), with carry .whl and .devstate: the next tree's (.devstate/next37) whole GPU test
# suite, the files the next tree changed first, verbose, within TEST_SECONDS; then each test that failed is run
# again alone (one process, --tb=short) in what is left of CALL_SECONDS, so the log has its error.
#   TEST_SECONDS=400 CALL_SECONDS=570 bash notes/round35/next37_failures.sh
set -uo pipefail
first="tests/test_hopper.py tests/test_decode.py tests/test_experiments.py tests/test_launch.py tests/test_sm90_compile.py tests/test_analysis.py"
rest=$(cd .devstate/next37 && ls tests/test_*.py | grep -vxF -f <(tr ' ' '\n' <<<"$first") | tr '\n' ' ')
TESTS="$first $rest" TEST_SECONDS=${TEST_SECONDS:-400} DECODE_SECONDS=0 SPEED_SECONDS=0 \
  bash notes/round32/next37_probe.sh
mv "$OUT/gpu_tests_next37.log" "$OUT/gpu_tests_next37_all.log"
grep -o 'FAILED tests/[^ ]*' "$OUT/gpu_tests_next37_all.log" | sed 's/^FAILED //' | sort -u > "$OUT/failed.txt"
echo "$(wc -l < "$OUT/failed.txt") failed:"; cat "$OUT/failed.txt"
left=$(( ${CALL_SECONDS:-570} - SECONDS - 10 ))
if [ -s "$OUT/failed.txt" ] && [ "$left" -gt 30 ]; then
  cd .devstate/next37
  timeout "$left" python3 -m pytest -p no:cacheprovider --tb=short -rfE $(head -12 "$OUT/failed.txt") \
    > "$OUT/failed_again.log" 2>&1
  echo "rerun rc $?"; tail -5 "$OUT/failed_again.log"
fi
