#!/usr/bin/env bash
# On any GPU (an H100 will do), with carry .whl and .devstate: notes/round35/next37_failures.sh with the test files
# round 36's H100 runs did not reach (h100/, 55% of the suite) first, the longest compile check first, then those
# they did not finish (h100_rest/ began them: 25% of the suite); every failure is then run again alone.
#   TEST_SECONDS=400 CALL_SECONDS=570 bash notes/round36/next37_rest.sh
set -uo pipefail
FIRST="tests/test_sm90_compile.py tests/test_paper.py tests/test_pipeline.py tests/test_interpreter.py
tests/test_telemetry.py tests/test_published_archive.py tests/test_analysis.py tests/test_varlen.py tests/test_fp8.py
tests/test_flash_attn_api.py tests/test_kernels.py tests/test_features.py tests/test_training.py
tests/test_features_ablation.py" bash "$(dirname "$0")/../round35/next37_failures.sh"
