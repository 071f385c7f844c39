#!/usr/bin/env bash
# One H200 call of round 31: the next step of the grid (notes/round24/device_call.sh), then, if the call has a
# minute and a half left, the host-time probe (notes/round31/host_telemetry_probe.py) in what remains.
#   STEP=s3 bash notes/round31/device_call.sh COMMIT        (carry .whl and .devstate)
set -uo pipefail
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200"; exit 3; }
bash notes/round24/device_call.sh "$@"
rc=$?
left=$(( ${CALL_SECONDS:-585} - SECONDS ))
echo "grid rc $rc; $left s left in this call"
if [ "$left" -gt 90 ]; then
  export PYTHONPATH=$PWD/.site:$PWD PYTHONUNBUFFERED=1
  timeout "$left" python3 notes/round31/host_telemetry_probe.py "$OUT/host_telemetry_probe_h200.csv" \
    > "$OUT/host_telemetry_probe.log" 2>&1
  echo "probe rc $?"; tail -5 "$OUT/host_telemetry_probe.log"
fi
exit "$rc"
