#!/usr/bin/env bash
# The sha256 of what a grid measures (kernels/, experiments/, the Snakefile, envs/; caches left out), so a device
# call can check that the tree it was sent is the commit its rows will name (the device's .git is stale).
#   bash notes/round24/fingerprint.sh            the working tree's
#   bash notes/round24/fingerprint.sh COMMIT     that commit's
set -euo pipefail
measured="kernels experiments Snakefile envs"
digest() { find $measured -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | LC_ALL=C sort -z \
             | xargs -0 sha256sum | sha256sum | cut -d' ' -f1; }
if [ "$#" -eq 0 ]; then digest; exit; fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
git archive "$1" $measured | tar x -C "$tmp"
(cd "$tmp" && digest)
