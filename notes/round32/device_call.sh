#!/usr/bin/env bash
# One H200 call of round 32: the next step of 5d4a140's grid (notes/round24/device_call.sh), then, in what the call
# leaves, notes/round32/next37_probe.sh: the next tree's GPU tests (decoding, experiments), v38's decode probe,
# and its paired host times at 512.
#   STEP=s3 bash notes/round32/device_call.sh COMMIT        (carry .whl and .devstate)
set -uo pipefail
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200"; exit 3; }
bash notes/round24/device_call.sh "$@"
rc=$?
end=${CALL_SECONDS:-585}
left() { echo $(( end - SECONDS )); }
echo "grid rc $rc; $(left) s left in this call"
if [ "$(left)" -gt 100 ]; then  # the next tree's GPU tests first, then its probes, in what is left
  t=$(( $(left) - 10 )); [ "$t" -gt 150 ] && t=150
  TEST_SECONDS=$t DECODE_SECONDS=0 SPEED_SECONDS=0 bash notes/round32/next37_probe.sh
fi
if [ "$(left)" -gt 70 ]; then
  d=$(( $(left) - 10 )); [ "$d" -gt 120 ] && d=120
  TEST_SECONDS=0 DECODE_SECONDS=$d SPEED_SECONDS=0 bash notes/round32/next37_probe.sh
fi
if [ "$(left)" -gt 70 ]; then
  TEST_SECONDS=0 DECODE_SECONDS=0 SPEED_SECONDS=$(( $(left) - 10 )) bash notes/round32/next37_probe.sh
fi
exit "$rc"
