#!/usr/bin/env bash
# Rebuilds the next tree as a worktree at DIR: round 38's patches (notes/round38/next_tree.sh), then this round's
# 0019 (v44), 0020 (V^T's copy tile for probes) and 0022 (tests). 0021 (v45, the lazy rescale) is kept as a record
# only: slower on an H100 (notes/perf.md, v45).
#   bash notes/round39/next_tree.sh /work/next
set -euo pipefail
dir=${1:?give the directory of the worktree}
bash notes/round38/next_tree.sh "$dir"
notes=$PWD/notes
cd "$dir"
git am -q "$notes"/round39/0019-*.patch "$notes"/round39/0020-*.patch "$notes"/round39/0022-*.patch
git log --oneline -1
