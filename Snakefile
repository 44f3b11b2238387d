"""The sweep "when does multi-agent RL improve LLM workflows?".

    snakemake                    the embedded demo matrix on this machine, end to end
    snakemake --profile slurm    the paper matrix on a SLURM cluster
    snakemake figures            re-analyse the finished runs only; never trains
    snakemake -n                 dry-run: the job DAG of the matrix in use
    snakemake status             every run of the matrix and where it stands

How `snakemake figures` never trains, without looking at the command line: `figures` is a rule of
its own (rules/figures.smk) that writes the files of `analyse` and `plot_figures` in one job, running
the same two commands over the run directories whose done.json exists when the DAG is built. Those
are a parameter, not inputs, so the rule has no inputs and named as the target it is the whole DAG:
no train or base_model job can enter it. As parameters the finished runs (with their done.json
times) are a rerun trigger: the job runs again when one finished, else there is nothing to do. `ruleorder` gives the same files to
`analyse` and `plot_figures` for every other target, whose DAG is the same whatever was named.
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
