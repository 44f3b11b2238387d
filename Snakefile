"""The sweep "when does multi-agent RL improve LLM workflows?".

    snakemake                    the embedded demo matrix on this machine, end to end
    snakemake --profile slurm    the paper matrix on a SLURM cluster
    snakemake figures            re-analyse the finished runs only; never trains
    snakemake -n                 dry-run: the job DAG of the matrix in use
    snakemake status             every run of the matrix and where it stands

How `snakemake figures` never trains: `figures` is a rule without inputs or outputs
(rules/figures.smk), so when it is the target it is the only job of the DAG, and it always runs.
It runs the same analysis and figure commands as the `analyse` and `plot_figures` rules of the
default target, over the run directories whose done.json exists when the DAG is built (a parameter,
not an input, so no train job can be scheduled for it). The workflow is the same for every target:
nothing here depends on which target was named on the command line.
"""


configfile: "config.yaml"


report: "rules/report/workflow.rst"


include: "rules/common.smk"
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
