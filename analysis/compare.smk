# The `compare` target: one run beside another, cell by cell, with the run-to-run spread, flagging
# regressions beyond it (analysis/compare.py). Every kernel change runs it before it republishes.
#   snakemake --cores 1 compare                      # results/ (on a GPU: a fresh run) against the archive
#   snakemake --cores 1 compare --config compare='{baseline: results/archive/nvidia-h200, candidate: some/run}'
import sys

from experiments.schema import ABLATIONS as _COMPARED


def _compare_inputs(side: str) -> list[str]:
    folder = config["compare"][side].rstrip("/")
    if folder == "results":
        return RESULT_CSVS  # made (measured, or taken from the archive) by the experiment rules
    return [f"{folder}/{name}.csv" for name in _COMPARED if os.path.exists(f"{folder}/{name}.csv")]


rule compare:
    input:
        baseline=_compare_inputs("baseline"),
        candidate=_compare_inputs("candidate"),
    output:
        table="analysis/build/compare/compare.csv",
        summary="analysis/build/compare/compare.md",
    log:
        "analysis/build/logs/compare.log",
    params:
        python=sys.executable,
        baseline=config["compare"]["baseline"],
        candidate=config["compare"]["candidate"],
        out=lambda wildcards, output: os.path.dirname(output.table),
    localrule: True
    shell:
        "{params.python} -m analysis.compare {params.baseline} {params.candidate} --out {params.out}"
        " 2>&1 | tee {log}"
