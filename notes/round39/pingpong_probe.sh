#!/usr/bin/env bash
# On an H100 or H200, with carry .whl and .devstate (.devstate/next: `git archive` of the next tree at 0022 without
# notes/ and paper/published/, plus kernels/_hopper_v43.py, 3f48b13's kernels/_hopper.py): the GPU tests 0022 changed,
# then notes/round39/pingpong_probe.py, through fp8_probe.sh.
#   TEST_SECONDS=60 PROBE_SECONDS=150 bash notes/round39/pingpong_probe.sh
TEST_SECONDS=${TEST_SECONDS:-60} TEST_K="rising or refuses_hopper" PROBE=pingpong_probe \
  exec bash "$(dirname "$0")/fp8_probe.sh"
