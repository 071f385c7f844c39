"""The archive of GPU runs under results/archive/<gpu>/: saving a measured run, restoring from it.

  python -m experiments.archive save --gpu nvidia-h200 --dest results/archive/nvidia-h200 results/*.csv
      checks that every row was measured on that GPU by one clean commit (the published archive comes
      from a single commit whose kernels are on main), copies the CSVs and writes provenance.json
      (GPU, driver, CUDA, torch, triton, commits, time span, and each file's rows, statuses and sha256)
  python -m experiments.archive restore --gpu nvidia-h200 results/archive/nvidia-h200/speed.csv results/speed.csv
      copies an archived CSV into results/, its rows marked source=archive:<gpu>
The Snakemake targets `archive` and (on a host without a GPU) each performance ablation call these.
"""
import argparse
import collections
import hashlib
import json
import os
import shutil
import sys

from experiments import provenance, results

SUMMARISED = ("gpu", "driver", "cuda", "torch", "triton", "commit")


def save(csv_paths: list[str], gpu: str, dest: str) -> None:
    seen, files = collections.defaultdict(set), {}
    for path in csv_paths:
        rows = results.read_csv(path)
        for row in rows:
            if row["source"] != "measured" or provenance.slug(row["gpu"]) != gpu:
                sys.exit(f"{path}: a row from {row['source']} on GPU {row['gpu']!r} cannot go into the archive of {gpu}; "
                         f"archive a run measured on that GPU (or set --config archive_gpu={provenance.slug(row['gpu'])})")
            for column in SUMMARISED + ("timestamp",):
                seen[column].add(row[column])
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        files[os.path.basename(path)] = {"rows": len(rows), "sha256": digest}
        if rows and "status" in rows[0]:  # side files (training_loss.csv) carry no status column
            files[os.path.basename(path)]["status"] = dict(collections.Counter(row["status"] for row in rows))
    commits = sorted(seen["commit"])
    if len(commits) != 1 or commits[0] in ("", "unknown") or commits[0].endswith("-dirty"):
        sys.exit(f"the rows come from commits {commits}: an archive holds one run of one clean commit; "
                 "re-measure what differs (snakemake -f <ablation>) at the commit you are publishing")
    stamps = sorted(seen["timestamp"] - {""}) or [""]
    summary = {"gpu_slug": gpu, **{column: sorted(seen[column]) for column in SUMMARISED}, "run_commit": commits[0],
               "first_timestamp": stamps[0], "last_timestamp": stamps[-1],
               "archived_at": provenance.timestamp(), "files": files}
    os.makedirs(dest, exist_ok=True)
    for path in csv_paths:
        shutil.copyfile(path, os.path.join(dest, os.path.basename(path)))
    with open(os.path.join(dest, "provenance.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    print(f"archived {len(csv_paths)} files into {dest}")


def archived_csv(archive_dir: str, ablation: str) -> str:
    """The archived CSV of an ablation, or an error that says how to make it."""
    path = os.path.join(archive_dir, f"{ablation}.csv")
    if not os.path.exists(path):
        parent = os.path.dirname(archive_dir)
        available = sorted(os.listdir(parent)) if os.path.isdir(parent) else []
        raise FileNotFoundError(
            f"{path} is missing: without a CUDA GPU, {ablation} comes from the archive of a GPU run. "
            f"Archives here: {available or 'none'} (choose one with --config archive_gpu=<name>). "
            f"To make one, on a machine with a CUDA GPU run `snakemake --cores 1 archive` and commit {parent}/.")
    return path


def restore(archived: str, output: str, gpu: str) -> None:
    rows = results.read_csv(archived)
    for row in rows:
        row["source"] = f"archive:{gpu}"
    results.write_csv(rows, output)
    print(f"{output}: {len(rows)} rows from {archived}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    saving = commands.add_parser("save", help="copy a measured run into the archive")
    saving.add_argument("--gpu", required=True, help="archive folder name, e.g. nvidia-h200")
    saving.add_argument("--dest", required=True)
    saving.add_argument("csv", nargs="+")
    restoring = commands.add_parser("restore", help="copy an archived CSV into results/")
    restoring.add_argument("--gpu", required=True)
    restoring.add_argument("archived")
    restoring.add_argument("output")
    args = parser.parse_args(argv)
    if args.command == "save":
        save(args.csv, args.gpu, args.dest)
    else:
        restore(args.archived, args.output, args.gpu)


if __name__ == "__main__":
    main()
