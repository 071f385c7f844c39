# The analysis and report stage: results/*.csv -> figures, claim verdicts, facts -> paper/build/report.*
# Included by the top-level Snakefile; `rule all` depends on REPORT_OUTPUTS.
import shutil
import sys
from pathlib import Path

_repository = str(Path(workflow.current_basedir).parent)
if _repository not in sys.path:
    sys.path.insert(0, _repository)

from analysis.catalog import BUILD_DIR, FIGURES, caption_path, figure_paths  # noqa: E402
from experiments.schema import SIDE_FILES  # noqa: E402

# The analysis code: a change to it reruns what it computes (Snakemake does not track imported modules).
ANALYSIS_CODE = sorted(f"analysis/{path.name}" for path in Path(workflow.current_basedir).glob("*.py")
                       if path.name != "compare.py")
PAPER_BUILD = "paper/build"
PUBLISHED = "paper/published/h200"
REPORT_OUTPUTS = [f"{PAPER_BUILD}/report.md", f"{PAPER_BUILD}/report.tex"] + (
    [f"{PAPER_BUILD}/report.pdf"] if shutil.which("latexmk") else [])
# The results this host has (experiments/rules.smk: on a host without a GPU an ablation that the archive does
# not hold is left out; the analysis then says it was not measured), with the files written beside them.
ALL_RESULTS = RESULT_CSVS + SIDE_CSVS
RESULTS_DIR = "results"
ALL_FIGURES = [str(path) for name in FIGURES for path in figure_paths(name).values()]

for _name, _experiments in FIGURES.items():
    rule:
        name: f"figure_{_name}"
        input:
            results=[path for experiment in _experiments for path in ALL_RESULTS
                     if Path(path).stem in (experiment, *SIDE_FILES.get(experiment, ()))],
            hardware="analysis/hardware.yaml",
            code=ANALYSIS_CODE,
        output:
            pdf=report(str(figure_paths(_name)["pdf"]), caption=str(caption_path(_name)), category="Figures"),
            png=str(figure_paths(_name)["png"]),
        conda:
            "../envs/analysis.yaml"
        log:
            f"{BUILD_DIR}/logs/figure_{_name}.log",
        params:
            python=sys.executable,
            name=_name,
            # a figure of an ablation not measured has no input (it says so): then the results folder by name
            results=lambda wildcards, input: Path(input.results[0]).parent if input.results else RESULTS_DIR,
            out=lambda wildcards, output: Path(output.png).parent,
        shell:
            "{params.python} -m analysis.figures {params.name} {params.results} {params.out} > {log} 2>&1"


rule claims:
    input:
        results=ALL_RESULTS,
        claims="analysis/claims.yaml",
        hardware="analysis/hardware.yaml",
        code=ANALYSIS_CODE,
    output:
        verdicts=f"{BUILD_DIR}/verdicts.json",
        table=report(f"{BUILD_DIR}/claims.csv", category="Claims"),
    conda:
        "../envs/analysis.yaml"
    log:
        f"{BUILD_DIR}/logs/claims.log",
    params:
        python=sys.executable,
        results=lambda wildcards, input: Path(input.results[0]).parent,
    shell:
        "{params.python} -m analysis.claims {params.results} {output.verdicts} {output.table} > {log} 2>&1"


rule facts:
    input:
        figures=ALL_FIGURES,  # facts.json names each figure's files
        results=ALL_RESULTS,
        hardware="analysis/hardware.yaml",
        claims="analysis/claims.yaml",
        captions=[str(caption_path(name)) for name in FIGURES],
        code=ANALYSIS_CODE,
        threshold="experiments/measure.py",  # the method prints its HOST_BOUND_EXCESS
    output:
        f"{BUILD_DIR}/facts.json",
    conda:
        "../envs/analysis.yaml"
    log:
        f"{BUILD_DIR}/logs/facts.log",
    params:
        python=sys.executable,
        results=lambda wildcards, input: Path(input.results[0]).parent,
        figures=lambda wildcards, input: Path(input.figures[0]).parent,
    shell:
        "{params.python} -m analysis.facts {params.results} {params.figures} {output} > {log} 2>&1"


rule report:
    input:
        ALL_FIGURES,
        verdicts=rules.claims.output.verdicts,
        facts=rules.facts.output[0],
        templates=["paper/templates/sections.j2", "paper/templates/report.md.j2", "paper/templates/report.tex.j2"],
        renderer=["paper/render.py", "paper/publish.py"],
        bibliography="paper/references.bib",
        citation="CITATION.cff",
    output:
        REPORT_OUTPUTS,
    conda:
        "../envs/analysis.yaml"
    log:
        f"{BUILD_DIR}/logs/report.log",
    params:
        python=sys.executable,
        analysis=lambda wildcards, input: Path(input.verdicts).parent,
        out=lambda wildcards, output: Path(output[0]).parent,
    shell:
        "{params.python} -m paper.render {params.analysis} {params.out} > {log} 2>&1"


rule publish:
    input:
        REPORT_OUTPUTS,
    output:
        [f"{PUBLISHED}/{Path(path).name}" for path in REPORT_OUTPUTS if not path.endswith(".tex")]
        + [f"{PUBLISHED}/figures/{figure_paths(name)['png'].name}" for name in FIGURES],
    conda:
        "../envs/analysis.yaml"
    log:
        f"{BUILD_DIR}/logs/publish.log",
    params:
        python=sys.executable,
        build=lambda wildcards, input: Path(input[0]).parent,
        published=lambda wildcards, output: Path(output[0]).parent,
    shell:
        # README.md's results block is rewritten in place (not an output: snakemake would delete it first).
        "{params.python} -m paper.publish {params.build} {params.published} --readme README.md > {log} 2>&1"
