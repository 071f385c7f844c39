#!/usr/bin/env bash
# Rebuilds the next tree as a worktree at DIR: round 38's patches (notes/round38/next_tree.sh), then this round's
# 0019 (v44) and 0022 (tests). 0020 (V^T's copy tile as a probe's parameter: no tile was faster) and 0021 (v45, the
# lazy rescale: slower on an H100) are kept as records only (notes/perf.md, v44 and v45 measured).
#   bash notes/round39/next_tree.sh /work/next
set -euo pipefail
dir=${1:?give the directory of the worktree}
bash notes/round38/next_tree.sh "$dir"
notes=$PWD/notes
cd "$dir"
git am -q "$notes"/round39/0019-*.patch "$notes"/round39/0022-*.patch
git log --oneline -1
