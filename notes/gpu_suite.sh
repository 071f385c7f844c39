#!/usr/bin/env bash
# The GPU test suite in parts that each fit one device call, verbose so that a failure is named.
#   bash notes/gpu_suite.sh PART [SECONDS]     (on the H200, from the repo root; PART 1-4, SECONDS default 520)
# after the carried wheels' install line of ../shared/device/README.md (part 4's pipeline tests need snakemake).
# Writes $OUT/gpu_suite_partPART.txt (pytest -n 8 -v -rfE) and prints its failures and summary line.
# The parts group the test files by their run time on the H200 in the 2026-12-02 runs
# (notes/gpu_tests_500312e_h200.txt): the whole suite at -n 8 takes longer than one 10-minute call.
# Every tests/test_*.py but test_sm90_compile.py is in one part; CI runs all of them on the CPU, these runs add the
# GPU paths. test_sm90_compile.py only compiles (ptxas, no GPU) and took 147 s of a GPU call: CI covers it.
set -uo pipefail
part=$1 seconds=${2:-520}
case $part in
  1) files="tests/test_hopper.py tests/test_kernels.py" ;;
  2) files="tests/test_flash_attn_api.py tests/test_features.py tests/test_varlen.py" ;;
  3) files="tests/test_decode.py tests/test_fp8.py tests/test_fa1.py tests/test_launch.py tests/test_interpreter.py" ;;
  4) files="tests/test_training.py tests/test_experiments_gpus.py tests/test_analysis.py tests/test_compare.py
            tests/test_experiments.py tests/test_pipeline.py tests/test_paper.py tests/test_features_ablation.py
            tests/test_decode_ablation.py tests/test_telemetry.py" ;;
  *) echo "PART must be 1-4" >&2; exit 2 ;;
esac
log="${OUT:-.}/gpu_suite_part$part.txt"
# shellcheck disable=SC2086  # the file list splits on purpose
timeout "$seconds" python3 -m pytest -n 8 -v -rfE -p no:cacheprovider $files > "$log" 2>&1
status=$?
grep -E "^(FAILED|ERROR) |[0-9]+ (passed|failed)" "$log" | tail -20
[ "$status" = 124 ] && echo "part $part stopped at its ${seconds} s limit: $(grep -c PASSED "$log") passed before it"
exit "$status"
