"""Wall time of each ablation job of a multi-step GPU run, read from the steps' snakemake logs.

    .venv/bin/python notes/step_times.py results/archive/nvidia-h200/logs > notes/round11_step_times.txt

A job's time runs from the timestamp before its `localrule measure` (`wildcards: ablation=...`) to the one
before its `Finished jobid`, so the precompile and the process start are in it; a job still running when
its step's time limit stopped snakemake is counted up to the step's last timestamp.
"""
import datetime as dt
import re
import sys
from pathlib import Path

STAMP = re.compile(r"\[(\w{3} \w{3} +\d+ [\d:]+ \d{4})\]")


def job_times(log: Path) -> list[tuple[str, float, str]]:
    rows, started, stamp = [], {}, None
    for line in log.read_text().splitlines():
        if m := STAMP.match(line):
            stamp = dt.datetime.strptime(" ".join(m.group(1).split()), "%a %b %d %H:%M:%S %Y")
        elif m := re.search(r"wildcards: ablation=(\w+)", line):
            started[m.group(1)] = stamp
        elif "Finished jobid" in line and "(Rule: measure)" in line and started:
            ablation = list(started)[-1]
            rows.append((ablation, (stamp - started.pop(ablation)).total_seconds(), "done"))
    rows += [(ablation, (stamp - t0).total_seconds(), "stopped by the step's limit") for ablation, t0 in started.items()]
    return rows


def main(folder: str) -> None:
    total = 0.0
    for log in sorted(Path(folder).glob("step*-snakemake.log")):
        for ablation, seconds, how in job_times(log):
            print(f"{log.name[:5]}  {ablation:<14} {seconds:6.0f} s  {how}")
            total += seconds
    print(f"sum {total / 60:.1f} min over the jobs above (one GPU, one job at a time)")


if __name__ == "__main__":
    main(sys.argv[1])
