#!/usr/bin/env bash
# On any GPU (an H100 will do), with carry .whl and .devstate: the next tree's GPU tests that none of the three
# H100 runs reached (notes/round36/h100/, notes/round36/h100_rest/, notes/round37/h100_rest/): test_fa1's default
# tiles and test_features' dropout cases, listed in notes/round37/never_run.txt; failures are run again alone.
#   TEST_SECONDS=200 CALL_SECONDS=260 bash notes/round37/next37_last.sh
set -uo pipefail
FIRST="tests/test_fa1.py::test_fa1_default_tiles_fit_the_gpu $(grep -v test_fa1_default_tiles notes/round37/never_run.txt | tr '\n' ' ')"
FIRST="$FIRST" FIRST_ONLY=1 bash "$(dirname "$0")/../round35/next37_failures.sh"
