#!/usr/bin/env bash
# On any GPU (an H100 will do), with carry .whl and .devstate: the next tree's GPU tests that none of the three
# H100 runs reached (notes/round36/h100/, notes/round36/h100_rest/, notes/round37/h100_rest/): test_fa1's default
# tiles and test_features' dropout cases, listed in notes/round37/never_run.txt; failures are run again alone.
#   TEST_SECONDS=200 CALL_SECONDS=260 bash notes/round37/next37_last.sh
set -uo pipefail
FIRST="tests/test_fa1.py::test_fa1_default_tiles_fit_the_gpu $(grep -v test_fa1_default_tiles notes/round37/never_run.txt | tr '\n' ' ')"
# next37_failures.sh appends every other file after FIRST; the whole of it is not wanted here
sed 's/^TESTS="$first $rest"/TESTS="$first"/' "$(dirname "$0")/../round35/next37_failures.sh" > /tmp/next37_last_inner.sh
grep -q '^TESTS="$first" ' /tmp/next37_last_inner.sh || { echo "next37_failures.sh changed: edit next37_last.sh"; exit 1; }
cd "$(dirname "$0")/../.." && FIRST="$FIRST" bash /tmp/next37_last_inner.sh
