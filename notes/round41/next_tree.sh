#!/usr/bin/env bash
# Rebuilds the next tree as a worktree at DIR, as notes/round39/next_tree.sh does, with round 27's 0002 (v29, the
# in-place decode merge) replaced by notes/round41's copy: round 41 changed the decode bandwidth claim's "why" line
# on main, which 0002 also rewrites, and the copy here carries both. The kernels are the same as round 39's tree.
# The patches apply on main from round 41 on, with 5d4a140's kernels (before round 41, use round 39's script).
#   bash notes/round41/next_tree.sh /work/next
set -euo pipefail
dir=${1:?give the directory of the worktree}
# the base: HEAD where its kernels are 5d4a140's (after notes/round26/resume.sh), else the commit before the last
# "Revert 5d4a140's kernels again" (main's last tree with them)
if git diff --quiet 5d4a14096df6e35a448e43d2cf6a0e4690620bc7 HEAD -- kernels experiments Snakefile envs; then
  base=$(git rev-parse HEAD)
else
  base=$(git log -1 --format=%H --grep="^Revert 5d4a140's kernels again")^
fi
git worktree add -q -b "${BRANCH:-next41}" "$dir" "$base"
notes=$PWD/notes
cd "$dir"
git am -q "$notes"/round27/0001-*.patch "$notes"/round41/0002-*.patch "$notes"/round28/000[345]-*.patch \
  "$notes"/round30/000[78]-*.patch "$notes"/round32/0010-*.patch "$notes"/round31/0009-*.patch \
  "$notes"/round32/0011-*.patch "$notes"/round32/0012-*.patch "$notes"/round38/001[3-8]-*.patch \
  "$notes"/round39/0019-*.patch "$notes"/round39/0022-*.patch
git log --oneline -1
