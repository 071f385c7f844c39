"""Correct the commit column of round 24's H200 rows, and write the tarball the next grid step resumes from.

The three device calls of 2026-12-05 ran the tree of 10b3c64 (v22 + v20 + the feature defaults + the host-time
changes, whose kernels/experiments/analysis/paper equal 4327afb's). notes/round24/device_call.sh took the commit
name from `git rev-parse HEAD` on the device, whose copy of the repository's history was main as it stood when
the session began (8dc7cfc, v19's kernels), so every row says 8dc7cfc. The rows are 10b3c64's: the speed
ablation's Hopper backward at head dims 192 and 256 (v20, absent from 8dc7cfc) is faster in all 48 of its cells,
and the window and softcap cells of `features` (v22) are faster, against the archive (notes/round24/README.md).

    python3 notes/round24/relabel_commit.py notes/round24/h200/results_s3_as_returned.tgz .devstate/results.tgz

Rewrites `commit` in results/*.csv from the wrong name to the right one (nothing else), drops results/.partial
(its one file is the header of a causal run that measured no cell) and results/archive (the tree carries its own),
and refuses a tarball whose rows name any other commit.
"""
import io
import sys
import tarfile

import pandas as pd

WRONG = "8dc7cfc6a41f47f27587478e1dd46bae596a5280"
MEASURED = "10b3c64eb73541c157225c2ad532f7b9979aaa9e"


def main(source: str, target: str) -> None:
    with tarfile.open(source) as tar_in, tarfile.open(target, "w:gz") as tar_out:
        for member in tar_in.getmembers():
            name = member.name
            if name.startswith(("results/.partial", "results/archive")):
                continue
            data = tar_in.extractfile(member).read() if member.isfile() else None
            if data is not None and name.endswith(".csv") and name.count("/") == 1:
                frame = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)
                commits = set(frame["commit"])
                if commits != {WRONG}:
                    sys.exit(f"{name}: commits {sorted(commits)}, expected only {WRONG}")
                if data.count(WRONG.encode()) != len(frame):  # the name appears in the commit column only
                    sys.exit(f"{name}: {WRONG} appears outside the commit column")
                data = data.replace(WRONG.encode(), MEASURED.encode())  # bytes otherwise untouched
                print(f"{name}: {len(frame)} rows relabelled {WRONG[:7]} -> {MEASURED[:7]}")
            if data is not None:
                member.size = len(data)
                tar_out.addfile(member, io.BytesIO(data))
            else:
                tar_out.addfile(member)


if __name__ == "__main__":
    main(*sys.argv[1:3])
