#!/usr/bin/env bash
# One H200 call of round 31: the next step of the grid (notes/round24/device_call.sh), then, in what is left of
# the call, the v36 paged-decode probe, the host-time probe (notes/round31/host_telemetry_probe.py) and the next
# tree's GPU tests (notes/round31/run_v36.sh), each only if it has time.
#   STEP=s3 bash notes/round31/device_call.sh COMMIT        (carry .whl and .devstate)
set -uo pipefail
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200"; exit 3; }
bash notes/round24/device_call.sh "$@"
rc=$?
end=${CALL_SECONDS:-585}
left() { echo $(( end - SECONDS )); }
echo "grid rc $rc; $(left) s left in this call"
if [ "$(left)" -gt 100 ]; then
  t=$(( $(left) - 10 )); [ "$t" -gt 150 ] && t=150
  PROBE_SECONDS=$t TEST_SECONDS=0 bash notes/round31/run_v36.sh
fi
if [ "$(left)" -gt 90 ]; then
  export PYTHONPATH=$PWD/.site:$PWD PYTHONUNBUFFERED=1
  timeout $(( $(left) - 10 )) python3 notes/round31/host_telemetry_probe.py "$OUT/host_telemetry_probe_h200.csv" \
    > "$OUT/host_telemetry_probe.log" 2>&1
  echo "host probe rc $?"; tail -5 "$OUT/host_telemetry_probe.log"
fi
if [ "$(left)" -gt 60 ]; then
  PROBE_SECONDS=0 TEST_SECONDS=$(( $(left) - 10 )) bash notes/round31/run_v36.sh
fi
exit "$rc"
