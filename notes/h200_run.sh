#!/usr/bin/env bash
# One step of a full re-measurement on the lent H200, as run for the published archive.
#   [CORES=2 STEP_SECONDS=540] bash notes/h200_run.sh COMMIT STEP [SNAKEMAKE ARGS: targets, then --resources gpu=N]
# COMMIT names the (clean, committed) tree the rows come from (provenance), STEP names the logs.
# It installs the carried snakemake wheels, restores the results of an earlier step from
# .devstate/results.tgz when this machine is fresh, runs snakemake on the targets within the
# command's time limit (the pipeline resumes where a step stopped), and leaves results, journals
# and logs in $OUT/results.tgz for the next step.
# Leave STEP_SECONDS a minute below the command's limit: at the timeout snakemake gets 20 s to stop its
# jobs before it and they are killed, then the tar runs; a command killed before the tar returns nothing
# (and leaves a lock: rm -rf .snakemake/locks before the next step). The machine keeps results/ while it
# stays warm, so a lost tar can still be fetched by a short call that only runs the tar line below.
set -uo pipefail
commit=$1 step=$2; shift 2
# a warm machine keeps .site from its last call (installing again prints a warning per package)
[ -d .site/snakemake ] || python3 -m pip install -q --no-index --no-deps --no-compile --target .site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/.site:$PWD PYTHONUNBUFFERED=1 EXPERIMENTS_COMMIT=$commit
if [ ! -d results/.partial ] && [ -f .devstate/results.tgz ]; then tar xzf .devstate/results.tgz; fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv | tee "$OUT/$step-gpu.txt"
# snakemake writes to a file, not a pipe: a job it stopped can hold a pipe open for minutes after the
# timeout (2026-12-02: the features and training jobs did, and the call hit its limit before the tar).
# -k: SIGKILL 20 s after the SIGTERM; then the stopped jobs' processes go too (their cells are journaled).
timeout -k 20 "${STEP_SECONDS:-540}" python3 -m snakemake --cores "${CORES:-1}" "$@" > "$OUT/$step-snakemake.log" 2>&1
status=$?
pkill -KILL -f "experiments\.(run|telemetry)|multiprocessing\.(spawn|forkserver)" 2>/dev/null
grep -v '^\[.* [0-9]*/[0-9]*\]' "$OUT/$step-snakemake.log" | tail -40
tar czf "$OUT/results.tgz" results/*.csv results/logs results/.partial results/archive 2>/dev/null
ls results/*.csv 2>/dev/null
exit "$status"
