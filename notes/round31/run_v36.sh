#!/usr/bin/env bash
# On a GPU: the v36 paged-decode probe, then the next tree's decoding and flash-attn API GPU tests, in
# .devstate/next36 (`git archive` of the next tree: kernels, tests, experiments, analysis, pyproject.toml, notes/round31)
# with .devstate/_decode_before.py (the tree's kernels/_decode.py before v36). A part whose seconds are 0 is skipped.
#   TEST_SECONDS=200 PROBE_SECONDS=150 bash notes/round31/run_v36.sh
set -uo pipefail
root=$PWD
[ -d .site/snakemake ] || python3 -m pip install -q --no-index --no-deps --no-compile --target .site .whl/*.whl
cd .devstate/next36 || exit 2
export PYTHONPATH=$root/.site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,memory.total --format=csv > "$OUT/gpu.txt"
if [ "${PROBE_SECONDS:-150}" -gt 0 ]; then
  timeout "${PROBE_SECONDS:-150}" python3 notes/round31/decode_paged_probe.py "$root/.devstate/_decode_before.py" \
    "$OUT/decode_paged_probe.csv" > "$OUT/decode_paged_probe.log" 2>&1
  echo "probe rc $?"; tail -3 "$OUT/decode_paged_probe.log"
fi
if [ "${TEST_SECONDS:-200}" -gt 0 ]; then
  timeout "${TEST_SECONDS:-200}" python3 -m pytest -n "${WORKERS:-8}" -q -rfE -p no:cacheprovider --durations=10 \
    tests/test_decode.py tests/test_flash_attn_api.py > "$OUT/gpu_tests_next36.log" 2>&1
  echo "tests rc $?"; tail -8 "$OUT/gpu_tests_next36.log"
fi
