# The `compare` target: one run beside another, cell by cell, with the run-to-run spread, flagging
# regressions beyond it (analysis/compare.py). Every kernel change runs it before it republishes.
#   snakemake --cores 1 compare                      # results/ (on a GPU: a fresh run) against the archive
#   snakemake --cores 1 compare --config compare='{baseline: results/archive/nvidia-h200, candidate: some/run}'
import os
import sys

from analysis.catalog import compare_inputs
from experiments.schema import ABLATIONS as COMPARED_ABLATIONS


rule compare:
    input:
        baseline=compare_inputs(config["compare"]["baseline"], RESULT_CSVS, COMPARED_ABLATIONS),
        candidate=compare_inputs(config["compare"]["candidate"], RESULT_CSVS, COMPARED_ABLATIONS),
    output:
        table="analysis/build/compare/compare.csv",
        summary="analysis/build/compare/compare.md",
    log:
        "analysis/build/logs/compare.log",
    conda:
        "../envs/analysis.yaml"
    params:
        python=sys.executable,
        baseline=lambda wildcards, input: os.path.dirname(input.baseline[0]),
        candidate=lambda wildcards, input: os.path.dirname(input.candidate[0]),
        out=lambda wildcards, output: os.path.dirname(output.table),
    localrule: True
    shell:
        "{params.python} -m analysis.compare {params.baseline} {params.candidate} --out {params.out}"
        " 2>&1 | tee {log}"
