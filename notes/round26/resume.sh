#!/usr/bin/env bash
# Puts 5d4a140's kernels (v25, v26, v27) back on main and prepares the rest of their H200 grid (features,
# training, fp8, causal, then the archive rule), on a clean tree:
#   bash notes/round26/resume.sh
# then, on an H200 only, with carry [".whl", ".devstate"] (the commit written out: the device's .git is stale):
#   STEP=s3 bash notes/round24/device_call.sh 5d4a14096df6e35a448e43d2cf6a0e4690620bc7
# and copy $OUT/results.tgz to .devstate/results.tgz after each call until the archive rule has run.
set -euo pipefail
MEASURED=5d4a14096df6e35a448e43d2cf6a0e4690620bc7
# the commit that took them off main last: 9b8f9f6 (round 26), then each later round's "Revert 5d4a140's kernels
# again (round N)", found by its subject (the rounds' own resume.sh name theirs; an older one's is already undone)
last=$(git log -1 --format=%h --grep="^Revert 5d4a140's kernels again")
REVERT=${REVERT:-${last:-9b8f9f6}}
[ -z "$(git status --porcelain --untracked-files=no)" ] || { echo "the tree has changes: commit or stash them"; exit 1; }
git revert --no-edit "$REVERT"
git commit -q --amend -m "Reapply 5d4a140's kernels (v25, v26, v27; reverts $REVERT) for the rest of their H200 grid"
# the rows already measured name 5d4a140: what the grid runs must be its code; tests, notes and the README may differ
if ! git diff --quiet "$MEASURED" HEAD -- kernels experiments Snakefile envs; then
  echo "HEAD's kernels, experiments, Snakefile or envs differ from 5d4a140's:"
  git diff --stat "$MEASURED" HEAD -- kernels experiments Snakefile envs; exit 1
fi
mkdir -p .devstate
grep -qx '/.devstate/' .git/info/exclude 2>/dev/null || echo '/.devstate/' >> .git/info/exclude
bash notes/round24/fingerprint.sh "$MEASURED" > .devstate/fingerprint   # device_call.sh checks the sent tree against it
[ "$(bash notes/round24/fingerprint.sh)" = "$(cat .devstate/fingerprint)" ] || { echo "the working tree is not 5d4a140's"; exit 1; }
# the rows of steps 1 and 2 already name 5d4a140 (the commit was written out in the run command): no relabelling
cp "${RESULTS:-notes/round26/h200/results_s2_5d4a140.tgz}" .devstate/results.tgz  # a later round may give a later step's
[ -d .whl ] || bash ../shared/device/wheels.sh
git log --oneline -1
