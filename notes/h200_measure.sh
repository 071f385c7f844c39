#!/usr/bin/env bash
# One device call of a re-measurement: optional GPU tests first (TESTS="pytest args"; the grid runs only
# if they pass), then the grid's remaining jobs within what is left of the call's ~10 minutes.
#   TESTS="tests/test_hopper.py" bash notes/h200_measure.sh COMMIT STEP [targets...]
# TESTS is split on spaces: give paths or node ids (tests/x.py::test_y), not -k expressions; WORKERS: xdist workers (8).
set -uo pipefail
commit=$1 step=$2; shift 2
# a warm machine keeps .site from its last call (installing again prints a warning per package)
[ -d .site/snakemake ] || python3 -m pip install -q --no-index --no-deps --no-compile --target .site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/.site:$PWD PYTHONUNBUFFERED=1
if [ -n "${TESTS:-}" ]; then
  timeout "${TEST_SECONDS:-300}" python3 -m pytest -n "${WORKERS:-8}" -q -rfE -p no:cacheprovider --durations=10 $TESTS \
    > "$OUT/$step-tests.log" 2>&1
  rc=$?
  tail -25 "$OUT/$step-tests.log"
  [ "$rc" -eq 0 ] || { echo "tests failed (rc $rc): no grid this call"; exit "$rc"; }
fi
[ "$#" -gt 0 ] || exit 0
rm -rf .snakemake/locks
left=$(( ${BUDGET_SECONDS:-560} - SECONDS ))
echo "grid: $left s left in this call"
[ "$left" -gt 90 ] || exit 0
TORCHINDUCTOR_COMPILE_THREADS=1 STEP_SECONDS=$left CORES=16 bash notes/h200_run.sh "$commit" "$step" "$@" \
  --resources gpu=1 --keep-going
