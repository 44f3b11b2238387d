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


onsuccess:
    # where a person finds the outputs, after the job progress
    print(
        f"\nDone. Runs: {RESULTS}/runs/<run>/ (train/eval/samples parquet, done.json); "
        f"summary: {RESULTS}/summary.md; tables: {RESULTS}/tables/; figures: {RESULTS}/figures/; "
        "HTML report: snakemake --report report.html"
    )
