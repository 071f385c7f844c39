#!/usr/bin/env bash
# On an sm_90 GPU: softcap's forward probe on v29's kernels and v31's, alternating twice, then v31's softcap tests.
# Run as .devstate/run_v31.sh (carry [".devstate"]) with .devstate/v29/kernels from main + notes/round27/000[12]
# and .devstate/v31/{kernels,tests,notes/round28,pyproject.toml} from those + notes/round28/0003 (git archive).
set -u
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv > "$OUT/gpu.txt"
for i in 1 2; do for t in v29 v31; do
  (cd $t && PYTHONPATH=. timeout 100 python3 ../v31/notes/round28/softcap_fwd_probe.py $t >> "$OUT/softcap_fwd_probe.csv" 2>> "$OUT/probe.err")
  echo "$t $i rc $?"
done; done
cd v31 && PYTHONPATH=. timeout "${TEST_SECONDS:-150}" python3 -m pytest -n 8 -q -rfE -p no:cacheprovider tests/test_hopper.py tests/test_features.py -k softcap > "$OUT/tests.log" 2>&1
echo "tests rc $?"; grep -v Benchmark "$OUT/tests.log" | tail -8
