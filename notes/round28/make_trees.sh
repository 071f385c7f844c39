#!/usr/bin/env bash
# Builds .devstate/v31 (HEAD + round 27's 0001, 0002 + round 28's 0003) and .devstate/v33 (those + 0004, 0005), the
# two trees notes/round28/run_v33.sh compares, from a HEAD with 5d4a140's kernels (after notes/round28/resume.sh):
#   bash notes/round28/make_trees.sh        then run .devstate/run_v33.sh on a GPU with carry [".devstate"]
set -euo pipefail
root=$(pwd)
tmp=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tmp"' EXIT
git worktree add -q --detach "$tmp" HEAD
cd "$tmp"
git -c user.name=probe -c user.email=probe@localhost am -q "$root"/notes/round27/000[12]-*.patch \
  "$root"/notes/round28/0003-*.patch
rm -rf "$root/.devstate/v31" "$root/.devstate/v33"
mkdir -p "$root/.devstate/v31" "$root/.devstate/v33"
git archive HEAD kernels tests pyproject.toml | tar x -C "$root/.devstate/v31"
git -c user.name=probe -c user.email=probe@localhost am -q "$root"/notes/round28/000[45]-*.patch
git archive HEAD kernels tests pyproject.toml | tar x -C "$root/.devstate/v33"
cp "$root/notes/round28/feature_fwd_probe.py" "$root/notes/round28/run_v33.sh" "$root/.devstate/"
echo "built .devstate/v31 and .devstate/v33"
