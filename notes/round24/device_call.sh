#!/usr/bin/env bash
# One device call of this round. On an H200: the next step of the grid for HEAD (notes/h200_measure.sh), which
# resumes from .devstate/results.tgz. On another GPU: the GPU tests of HEAD's tree with 8 workers, which checks
# that the exclusive-GPU-memory lock (tests/conftest.py) keeps the >2^31-element tests apart on an 80 GB card.
#   STEP=s1 bash notes/round24/device_call.sh COMMIT        (carry .whl and .devstate)
# COMMIT is the full name of the commit whose tree is sent, written out literally in the run command: the device's
# copy of .git is main as it stood when the session began, so `git rev-parse HEAD` there names the wrong commit
# (round 24's first three calls labelled their rows 8dc7cfc that way; relabel_commit.py corrects them).
set -uo pipefail
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "gpu: $gpu"
commit=${1:?give the full name of the commit whose tree is sent}
[[ "$commit" =~ ^[0-9a-f]{40}$ ]] || { echo "COMMIT must be a full 40-character commit name, not $commit"; exit 2; }
# .devstate/fingerprint (written here by `bash notes/round24/fingerprint.sh COMMIT > .devstate/fingerprint`) must be
# this tree's: otherwise the rows would name a commit whose code did not run
if [ -f .devstate/fingerprint ]; then
  sent=$(bash notes/round24/fingerprint.sh)
  [ "$sent" = "$(cat .devstate/fingerprint)" ] || { echo "this tree is not $commit's (fingerprint $sent): no measurement"; exit 2; }
  echo "tree fingerprint matches $commit"
else
  echo "no .devstate/fingerprint: the tree is not checked against $commit"
fi
case "$gpu" in
  *H200*) BUDGET_SECONDS=${BUDGET_SECONDS:-560} bash notes/h200_measure.sh "$commit" "${STEP:-s1}" results archive ;;
  *)
    [ -d .site/snakemake ] || python3 -m pip install -q --no-index --no-deps --no-compile --target .site .whl/*.whl
    export PYTHONPATH=$PWD/.site:$PWD PYTHONUNBUFFERED=1
    nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,memory.total --format=csv > "$OUT/gpu.txt"
    timeout "${TEST_SECONDS:-480}" python3 -m pytest -n "${WORKERS:-8}" -q -rfE -p no:cacheprovider --durations=15 \
      tests/test_hopper.py tests/test_kernels.py tests/test_features.py tests/test_varlen.py tests/test_launch.py \
      tests/test_decode.py tests/test_exclusive_gpu_memory.py > "$OUT/gpu_tests.log" 2>&1
    echo "tests rc $?"; tail -30 "$OUT/gpu_tests.log" ;;
esac
