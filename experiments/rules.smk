"""Rules of the experiment stage: one tidy CSV per ablation under results/.

With a CUDA GPU (mode measure) every ablation is measured by `python -m experiments.run`; without one
(mode archive) `accuracy` runs on Triton's interpreter (unless accuracy_on_cpu is false) and the other
ablations are copied from results/archive/<archive_gpu>/; an ablation that the archive does not hold yet
(a new one, measured by no GPU run so far) is left out of the default targets, so the report says it was
not measured, while its named target (`snakemake training`) fails saying how to make it. GPU jobs declare `resources: gpu=1` and pin themselves to a free
device (experiments/gpus.py), so `--resources gpu=N` runs N of them at once.
"""
import json
import os
import sys

from experiments import archive, gpus, grid
from experiments.schema import STANDALONE_ABLATIONS, side_files
from experiments.settings import ablation_settings

# The grid's ablations and those with runners of their own (jit): planned, archived and restored alike.
ABLATIONS = list(grid.ABLATIONS) + list(STANDALONE_ABLATIONS)
ARCHIVE = f"results/archive/{config['archive_gpu']}"
MODE = config["mode"] if config["mode"] != "auto" else ("measure" if gpus.visible_devices() else "archive")
if MODE == "measure":
    MEASURED = ABLATIONS
else:
    MEASURED = list(grid.INTERPRETER_ABLATIONS) if config["accuracy_on_cpu"] else []
ARCHIVED = [ablation for ablation in ABLATIONS if ablation not in MEASURED]
# Archived ablations whose CSV an existing archive lacks: not measured in that GPU run (a missing archive
# folder is an error, raised by archive.archived_csv when a target needs it).
NOT_ARCHIVED = [ablation for ablation in ARCHIVED
                if os.path.isdir(ARCHIVE) and not os.path.exists(f"{ARCHIVE}/{ablation}.csv")]
PRODUCED = [ablation for ablation in ABLATIONS if ablation not in NOT_ARCHIVED]
RESULT_CSVS = expand("results/{ablation}.csv", ablation=PRODUCED)


SIDE_CSVS = expand("results/{name}.csv", name=side_files(PRODUCED))
SETTINGS = ablation_settings(config, ABLATIONS)


if MEASURED:

    rule measure:
        output:
            csv="results/{ablation}.csv",
        log:
            "results/logs/{ablation}.log",
        conda:
            "../envs/experiments.yaml"
        wildcard_constraints:
            ablation="|".join(MEASURED),
        params:
            python=sys.executable,  # the interpreter running snakemake, a virtual environment's too
            settings=lambda wildcards: json.dumps(SETTINGS[wildcards.ablation]),
        resources:
            gpu=int(MODE == "measure"),
        shell:
            "{params.python} -m experiments.run {wildcards.ablation} --output {output.csv}"
            " --settings {params.settings:q} 2>&1 | tee {log}"


if "training" in MEASURED:

    rule training_loss:
        output:
            csv="results/training_loss.csv",
        log:
            "results/logs/training_loss.log",
        conda:
            "../envs/experiments.yaml"
        params:
            python=sys.executable,
            settings=json.dumps(SETTINGS["training"]),
        resources:
            gpu=1,
        shell:
            "{params.python} -m experiments.run training --loss-agreement --output {output.csv}"
            " --settings {params.settings:q} 2>&1 | tee {log}"


if ARCHIVED:

    rule from_archive:
        input:
            archived=lambda wildcards: archive.archived_csv(ARCHIVE, wildcards.ablation),
        output:
            csv="results/{ablation}.csv",
        log:
            "results/logs/{ablation}.log",
        conda:
            "../envs/experiments.yaml"
        wildcard_constraints:
            ablation="|".join(ARCHIVED + side_files(ARCHIVED)),
        params:
            python=sys.executable,
            gpu=config["archive_gpu"],
        localrule: True
        shell:
            "{params.python} -m experiments.archive restore --gpu {params.gpu}"
            " {input.archived} {output.csv} > {log} 2>&1"

else:

    rule archive:
        input:
            RESULT_CSVS,
            SIDE_CSVS,
        output:
            csv=expand(f"{ARCHIVE}/{{ablation}}.csv", ablation=ABLATIONS)
            + expand(f"{ARCHIVE}/{{name}}.csv", name=side_files(ABLATIONS)),
            provenance=f"{ARCHIVE}/provenance.json",
        log:
            "results/logs/archive.log",
        conda:
            "../envs/experiments.yaml"
        params:
            python=sys.executable,
            gpu=config["archive_gpu"],
            dest=lambda wildcards, output: os.path.dirname(output.provenance),
        localrule: True
        shell:
            "{params.python} -m experiments.archive save --gpu {params.gpu} --dest {params.dest}"
            " {input} > {log} 2>&1"


rule results:
    input:
        RESULT_CSVS,
        SIDE_CSVS,


for name in ABLATIONS:

    rule:
        name:
            name
        input:
            f"results/{name}.csv",
            expand("results/{side}.csv", side=side_files([name])),
