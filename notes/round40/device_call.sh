#!/usr/bin/env bash
# One H200 call of round 40: the next step of 5d4a140's grid (notes/round24/device_call.sh, resuming from
# .devstate/results.tgz), then, in what the call leaves, notes/round39/pingpong_probe.sh on the next tree
# (.devstate/next; v43 and v44, each with and without the consumers taking turns, one process).
#   STEP=s3 bash notes/round40/device_call.sh COMMIT        (carry .whl and .devstate)
set -uo pipefail
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200"; exit 3; }
bash notes/round24/device_call.sh "$@"  # its BUDGET_SECONDS (560 by default) bounds the grid step
rc=$?
end=${CALL_SECONDS:-585}
left=$(( end - SECONDS ))
echo "grid rc $rc; $left s left in this call"
if [ "$left" -gt 120 ] && [ -d .devstate/next ]; then
  p=$(( left - 40 )); [ "$p" -gt 150 ] && p=150
  TEST_SECONDS=30 PROBE_SECONDS=$p bash notes/round39/pingpong_probe.sh
fi
exit "$rc"
