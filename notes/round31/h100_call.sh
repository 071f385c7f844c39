#!/usr/bin/env bash
# One call on a GPU other than the H200 (no grid): the v36 paged-decode probe, the host-time probe, then the next
# tree's decoding and flash-attn API GPU tests, each within what is left of the call.
#   bash notes/round31/h100_call.sh        (carry .whl and .devstate)
set -uo pipefail
end=${CALL_SECONDS:-585}
left() { echo $(( end - SECONDS )); }
nvidia-smi --query-gpu=name --format=csv,noheader
PROBE_SECONDS=150 TEST_SECONDS=0 bash notes/round31/run_v36.sh
export PYTHONPATH=$PWD/.site:$PWD PYTHONUNBUFFERED=1
t=$(( $(left) - 250 )); [ "$t" -gt 120 ] && t=120
timeout "$t" python3 notes/round31/host_telemetry_probe.py "$OUT/host_telemetry_probe.csv" > "$OUT/host_telemetry_probe.log" 2>&1
echo "host probe rc $?"; tail -3 "$OUT/host_telemetry_probe.log"
PROBE_SECONDS=0 TEST_SECONDS=$(( $(left) - 10 )) bash notes/round31/run_v36.sh
