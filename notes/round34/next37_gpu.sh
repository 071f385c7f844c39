#!/usr/bin/env bash
# On any GPU (an H100 will do), with carry .whl and .devstate: notes/round32/next37_probe.sh on the next tree's
# (.devstate/next37) whole GPU test suite within TEST_SECONDS, then its decode probe and 512-token speed runs in what
# is left of CALL_SECONDS. (Round 34's run had these steps inline; its test log is h100/gpu_tests_next37_all.log.)
#   TEST_SECONDS=330 CALL_SECONDS=580 bash notes/round34/next37_gpu.sh
set -uo pipefail
TESTS=tests TEST_SECONDS=${TEST_SECONDS:-330} DECODE_SECONDS=0 SPEED_SECONDS=0 bash notes/round32/next37_probe.sh
left=$(( ${CALL_SECONDS:-580} - SECONDS ))
if [ "$left" -gt 80 ]; then
  d=$(( (left - 20) / 2 ))
  TEST_SECONDS=0 DECODE_SECONDS=$d SPEED_SECONDS=$d bash notes/round32/next37_probe.sh
fi
