"""The sweep "when does multi-agent RL improve LLM workflows?".

    snakemake                    the embedded demo matrix on this machine, end to end
    snakemake --profile slurm    the paper matrix on a SLURM cluster
    snakemake figures            re-analyse the finished runs only; never trains
    snakemake -n                 dry-run: the job DAG of the matrix in use
"""


configfile: "config.yaml"


report: "rules/report/workflow.rst"


include: "rules/common.smk"


if not REANALYSIS:

    include: "rules/train.smk"


include: "rules/analysis.smk"
include: "rules/figures.smk"


rule all:
    default_target: True
    input:
        get_final_output(),
