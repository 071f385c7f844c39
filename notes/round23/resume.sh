#!/usr/bin/env bash
# Puts v22 + v20 + v23 (4327afb's kernels) back on main for their H200 grid, on a clean tree:
#   bash notes/round23/resume.sh
# then, on an H200 only, with carry [".whl", ".devstate"], one call after another until the grid and the
# archive rule are done (copy $OUT/results.tgz to .devstate/results.tgz after each):
#   BUDGET_SECONDS=560 bash notes/h200_measure.sh $(git rev-parse HEAD) sN results archive
set -euo pipefail
[ -z "$(git status --porcelain --untracked-files=no)" ] || { echo "the tree has changes: commit or stash them"; exit 1; }
git revert --no-edit 0d94934
git commit -q --amend -m "Reapply v22, v20, the feature defaults and the host-time changes (reverts 0d94934) for their H200 grid"
# what the grid measures must be 4327afb's; tests and the README may have moved on since (listed)
if ! git diff --quiet 4327afb HEAD -- kernels experiments analysis paper; then
  echo "HEAD's kernels, experiments, analysis or paper differ from 4327afb's:"
  git diff --stat 4327afb HEAD -- kernels experiments analysis paper; exit 1
fi
git diff --stat 4327afb HEAD -- tests README.md
mkdir -p .devstate && rm -f .devstate/results.tgz
grep -qx '/.devstate/' .git/info/exclude 2>/dev/null || echo '/.devstate/' >> .git/info/exclude
[ -d .whl ] || bash ../shared/device/wheels.sh
git log --oneline -1
