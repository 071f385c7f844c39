#!/usr/bin/env bash
# After the last step of 5d4a140's grid: compare the new archive with the published one, then publish it.
#   bash notes/round29/publish.sh DIR...     DIR: each device call's files of this grid (s3, s4), in order
# .devstate/results.tgz must be the last call's $OUT/results.tgz (its results/archive/nvidia-h200 is the new archive).
# The step logs of the archive become this grid's: notes/round26/h200/s1-*, s2-* and each DIR's gpu.txt and
# snakemake.log as step3-*, step4-* (progress lines left out).
set -euo pipefail
rm -rf /tmp/oldarchive && mkdir -p /tmp/oldarchive
git archive HEAD results/archive/nvidia-h200 | tar x --strip-components=3 -C /tmp/oldarchive
rm -rf results/archive/nvidia-h200
tar xzf .devstate/results.tgz results/archive/nvidia-h200
logs=results/archive/nvidia-h200/logs
rm -f $logs/step*
strip() { grep -v '^\[.* [0-9]*/[0-9]*\]' "$1" > "$2" || true; }
strip notes/round26/h200/s1-gpu_5d4a140.txt $logs/step1-gpu.txt
strip notes/round26/h200/s1-snakemake_5d4a140.log $logs/step1-snakemake.log
strip notes/round26/h200/s2-gpu_5d4a140.txt $logs/step2-gpu.txt
strip notes/round26/h200/s2-snakemake_5d4a140.log $logs/step2-snakemake.log
n=3
for dir in "$@"; do
  for f in "$dir"/*gpu*.txt; do strip "$f" $logs/step$n-gpu.txt; done
  for f in "$dir"/*snakemake*.log; do strip "$f" $logs/step$n-snakemake.log; done
  n=$((n + 1))
done
ls $logs
.venv/bin/snakemake --cores 1 -f compare --config "compare={baseline: /tmp/oldarchive, candidate: results/archive/nvidia-h200}"
.venv/bin/snakemake --cores 1 publish --config mode=archive accuracy_on_cpu=false
