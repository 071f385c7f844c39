#!/usr/bin/env bash
# Puts 10b3c64's kernels (v22 + v20 + the feature defaults + the host-time changes) back on main and prepares the
# last step of their H200 grid (the causal ablation and the archive rule), on a clean tree:
#   bash notes/round24/resume.sh
# then, on an H200 only, with carry [".whl", ".devstate"] (the commit written out: the device's .git is stale):
#   STEP=s4 bash notes/round24/device_call.sh 10b3c64eb73541c157225c2ad532f7b9979aaa9e
# and copy $OUT/results.tgz to .devstate/results.tgz after each call until the archive rule has run.
set -euo pipefail
MEASURED=10b3c64eb73541c157225c2ad532f7b9979aaa9e
[ -z "$(git status --porcelain --untracked-files=no)" ] || { echo "the tree has changes: commit or stash them"; exit 1; }
git revert --no-edit 50daa37f45c9
git commit -q --amend -m "Reapply 10b3c64's kernels (v22, v20, the feature defaults, the host-time changes; reverts 50daa37) for the rest of their H200 grid"
# the rows already measured name 10b3c64: what the grid runs must be its code; tests, notes and the README may differ
if ! git diff --quiet "$MEASURED" HEAD -- kernels experiments Snakefile envs; then
  echo "HEAD's kernels, experiments, Snakefile or envs differ from 10b3c64's:"
  git diff --stat "$MEASURED" HEAD -- kernels experiments Snakefile envs; exit 1
fi
git diff --stat "$MEASURED" HEAD -- analysis paper tests README.md
mkdir -p .devstate
grep -qx '/.devstate/' .git/info/exclude 2>/dev/null || echo '/.devstate/' >> .git/info/exclude
bash notes/round24/fingerprint.sh "$MEASURED" > .devstate/fingerprint   # device_call.sh checks the sent tree against it
[ "$(bash notes/round24/fingerprint.sh)" = "$(cat .devstate/fingerprint)" ] || { echo "the working tree is not 10b3c64's"; exit 1; }
python3 notes/round24/relabel_commit.py notes/round24/h200/results_s3_as_returned.tgz .devstate/results.tgz
[ -d .whl ] || bash ../shared/device/wheels.sh
git log --oneline -1
