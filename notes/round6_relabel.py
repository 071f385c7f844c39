"""Correct the commit label of the round-6 rows measured in the first step of the H200 run.

    python3 notes/round6_relabel.py RESULTS_DIR

The first step of the round-6 run (`bash notes/h200_run.sh <COMMIT> step1 ...`) was given a commit
hash that names no commit (4bcc8f3e7a1e...), typed into the command instead of the one checked out.
The tree copied to the GPU host for that step was main at cc07b7d (clean; the same tree the later
steps were labelled with, correctly), so the rows it wrote (all of accuracy, jit, recompute, speed,
training; the first rows of decode and seqlen) carry a wrong `commit`. This rewrites that value to
cc07b7d1b67b59625e40fcc754990e792308e8d1 in every CSV and partial journal under RESULTS_DIR and
changes nothing else; it prints how many rows it relabelled per file.
"""
import pathlib
import sys

WRONG = "4bcc8f3e7a1e14b3d9d4ffdbf08ab4d58bcc4bb0"
MEASURED = "cc07b7d1b67b59625e40fcc754990e792308e8d1"


def main(folder: str) -> None:
    root = pathlib.Path(folder)
    for path in sorted([*root.glob("*.csv"), *root.glob(".partial/*.jsonl")]):
        text = path.read_text()
        count = text.count(WRONG)
        if count:
            path.write_text(text.replace(WRONG, MEASURED))
        print(f"{path.name}: {count} rows relabelled")


if __name__ == "__main__":
    main(sys.argv[1])
