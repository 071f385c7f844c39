#!/usr/bin/env bash
# Puts 5d4a140's kernels (v25, v26, v27) back on main and prepares the rest of their H200 grid, on a clean tree:
#   bash notes/round33/resume.sh
# notes/round26/resume.sh does the work (and says what to run next); this round took the kernels off main again
# with e64fa4c, so that is the commit it reverts.
REVERT=e64fa4c exec bash "$(dirname "$0")/../round26/resume.sh"
