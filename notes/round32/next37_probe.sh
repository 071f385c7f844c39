#!/usr/bin/env bash
# On a GPU, in .devstate/next37 (`git archive` of the next tree, branch next37: kernels, tests, experiments, analysis,
# pyproject.toml), each part within its seconds (0: skipped):
#   TEST_SECONDS   the GPU tests in TESTS (default tests/test_decode.py and tests/test_experiments.py: v38's stages,
#                  the paired timing), verbose, so a run cut at its limit still names each test and its outcome
#   DECODE_SECONDS notes/round32/decode_stages_probe.py: v38 against the paged kernel before v36
#                  (.devstate/_decode_before.py), the decode ablation's GQA shapes
#   SPEED_SECONDS  the pipeline's own speed runner at seqlen 512 only (ours and SDPA flash, head dims 64 and 128,
#                  both masks, every mode, two passes), which times ours' host time call by call against SDPA flash's
#   TEST_SECONDS=150 DECODE_SECONDS=150 SPEED_SECONDS=150 bash notes/round32/next37_probe.sh
set -uo pipefail
root=$PWD
[ -d .site/snakemake ] || python3 -m pip install -q --no-index --no-deps --no-compile --target .site .whl/*.whl
cd .devstate/next37 || exit 2
export PYTHONPATH=$root/.site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,memory.total --format=csv > "$OUT/next37_device.txt"
if [ "${TEST_SECONDS:-150}" -gt 0 ]; then
  timeout "${TEST_SECONDS:-150}" python3 -m pytest -n "${WORKERS:-8}" -v -rfE -p no:cacheprovider --durations=10 \
    ${TESTS:-tests/test_decode.py tests/test_experiments.py} > "$OUT/gpu_tests_next37.log" 2>&1
  echo "tests rc $?"; tail -8 "$OUT/gpu_tests_next37.log"
fi
if [ "${DECODE_SECONDS:-150}" -gt 0 ]; then
  timeout "${DECODE_SECONDS:-150}" python3 "$root/notes/round32/decode_stages_probe.py" "$root/.devstate/_decode_before.py" \
    "$OUT/decode_stages_probe.csv" > "$OUT/decode_stages_probe.log" 2>&1
  echo "decode probe rc $?"; tail -3 "$OUT/decode_stages_probe.log"
fi
if [ "${SPEED_SECONDS:-150}" -gt 0 ]; then
  settings=$(python3 - <<'PY'
import json
from experiments.settings import ablation_settings, load_default
s = ablation_settings(load_default(), ["speed"])["speed"]
s.update(seqlens=[512], head_dims=[64, 128], providers=["ours", "sdpa_flash"], flex_seqlens=[])
print(json.dumps(s))
PY
)
  timeout "${SPEED_SECONDS:-150}" python3 -m experiments.run speed --settings "$settings" \
    --output "$OUT/speed512_next37.csv" > "$OUT/speed512_next37.log" 2>&1
  echo "speed512 rc $?"; tail -3 "$OUT/speed512_next37.log"
fi
