"""FlashAttention-2 in Triton, reproduced: `snakemake --cores 1` measures every ablation on this
host's CUDA GPU (or, without one, takes the GPU results from results/archive/ and runs what the CPU
can), then builds the report. Named targets rerun one ablation: `snakemake --cores 1 tiles`.
See experiments/README.md."""
import os

from snakemake.utils import min_version

from experiments.settings import check, coerce_cli_strings

min_version("9.0")


configfile: "experiments/config.yaml"


coerce_cli_strings(config)  # --config 'speed={seqlens: [512]}' arrives as strings
check(config)  # a bad key or value stops here, named with what is allowed


include: "experiments/rules.smk"


if os.path.exists(os.path.join(workflow.basedir, "analysis", "rules.smk")):

    include: "analysis/rules.smk"

else:
    REPORT_OUTPUTS = []


if os.path.exists(os.path.join(workflow.basedir, "analysis", "compare.smk")):

    include: "analysis/compare.smk"


rule all:
    default_target: True
    input:
        RESULT_CSVS,
        SIDE_CSVS,
        REPORT_OUTPUTS,


onsuccess:
    built = [path for path in REPORT_OUTPUTS if os.path.exists(path)]
    if built:
        print("The report: " + ", ".join(built) + f" (performance from {'this GPU' if MODE == 'measure' else ARCHIVE})")
