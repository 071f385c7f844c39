#!/usr/bin/env bash
# Stage a patched source tree under .devstate/NAME (git-ignored; a device call carries it beside the
# checkout), so that one device call can test drafts on the GPU while the checkout itself runs main's
# kernels (a grid step, say). The tree is HEAD with v19 restored (605a4d4 reverted, unless HEAD already
# has it) and the given patches applied with `git am -3`; it holds kernels/, tests/, experiments/,
# analysis/, pyproject.toml and notes/round22.
#   bash notes/round22/stage_tree.sh v22 notes/round22/000[1-5]-*.patch
#   bash notes/round22/stage_tree.sh all notes/round22/000[1-7]-*.patch
# then on the device (carry [".whl", ".devstate"]):
#   cd .devstate/v22 && PYTHONPATH=$OLDPWD/.site:$PWD python3 -m pytest -n 14 -q tests/test_hopper.py
set -euo pipefail
name=$1; shift
root=$(pwd)
patches=()
for patch in "$@"; do patches+=("$root/$patch"); done
tmp=$(mktemp -d)
git worktree add -q --detach "$tmp" HEAD
trap 'git worktree remove --force "$tmp"' EXIT
cd "$tmp"
grep -q "^HEAD_DIMS = (64, 96, 128, 192, 256)" kernels/_hopper.py || git revert --no-edit 605a4d4 >/dev/null
[ ${#patches[@]} -eq 0 ] || git am -3 -q "${patches[@]}"
cd "$root"
rm -rf ".devstate/$name"
mkdir -p ".devstate/$name"
git -C "$tmp" archive HEAD kernels tests experiments analysis pyproject.toml notes/round22 | tar x -C ".devstate/$name"
echo "staged .devstate/$name: $(git -C "$tmp" log --oneline -1 | cut -c1-100)"
