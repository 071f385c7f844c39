#!/usr/bin/env bash
# Rebuilds the next tree (branch next37) as a worktree at DIR from the patches kept in notes/, on main's last
# "Reapply 5d4a140's kernels" commit (5d4a140's kernels on the tree of that round's main):
#   bash notes/round38/next_tree.sh /work/next
set -euo pipefail
dir=${1:?give the directory of the worktree}
base=$(git log -1 --format=%H --grep="^Reapply 5d4a140's kernels")
[ -n "$base" ] || { echo "no Reapply 5d4a140's kernels commit on this branch"; exit 1; }
git worktree add -q -b "${BRANCH:-next37}" "$dir" "$base"
notes=$PWD/notes
cd "$dir"
git am -q "$notes"/round27/000[12]-*.patch "$notes"/round28/000[345]-*.patch "$notes"/round30/000[78]-*.patch \
  "$notes"/round32/0010-*.patch "$notes"/round31/0009-*.patch "$notes"/round32/0011-*.patch \
  "$notes"/round32/0012-*.patch "$notes"/round38/001[3-8]-*.patch
git log --oneline -1
