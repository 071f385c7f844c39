#!/usr/bin/env bash
# One H200 call of round 32: the next step of 5d4a140's grid (notes/round24/device_call.sh), then, in what the call
# leaves, notes/round32/next37_probe.sh (the next tree's paired host times at 512 and its experiments/ GPU tests).
#   STEP=s3 bash notes/round32/device_call.sh COMMIT        (carry .whl and .devstate)
set -uo pipefail
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200"; exit 3; }
bash notes/round24/device_call.sh "$@"
rc=$?
end=${CALL_SECONDS:-585}
left() { echo $(( end - SECONDS )); }
echo "grid rc $rc; $(left) s left in this call"
if [ "$(left)" -gt 100 ]; then
  s=$(( $(left) - 10 )); [ "$s" -gt 150 ] && s=150
  t=$(( $(left) - s - 10 )); [ "$t" -lt 60 ] && t=0
  SPEED_SECONDS=$s TEST_SECONDS=$t bash notes/round32/next37_probe.sh
fi
exit "$rc"
