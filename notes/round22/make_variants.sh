#!/usr/bin/env bash
# The four commits the device call may name (notes/round22/device_probe_then_grid.sh), each HEAD plus
# `backward_features.py apply NAMES`, listed in .devstate/variants.txt as "names commit" ("none" for none).
# Run on a clean tree whose HOPPER_BACKWARD_FEATURES has its comment (v22 and 0008 applied); HEAD stays.
set -euo pipefail
base=$(git rev-parse HEAD) branch=$(git symbolic-ref -q --short HEAD || true)
mkdir -p .devstate && : > .devstate/variants.txt
for names in none window_size softcap softcap,window_size; do
  git checkout -q "$base"
  set_=${names/none/}
  python3 notes/round22/backward_features.py apply "$set_"
  git commit -q -am "HOPPER_BACKWARD_FEATURES = {$set_}: the default Hopper backward takes $([ -z "$set_" ] && echo 'no training feature' || echo "${set_//,/ and }") at head dims 64 and 128, decided by the H200 probe (notes/round22/backward_features.py)"
  echo "$names $(git rev-parse HEAD)" >> .devstate/variants.txt
done
git checkout -q "${branch:-$base}"
cat .devstate/variants.txt
