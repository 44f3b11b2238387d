# The study's figures, rendered from the analysis tables alone, and `snakemake figures`: the analysis
# and these figures again over the runs finished so far, in one job that never trains (see Snakefile).
from analysis.names import FIGURES as FIGURE_NAMES

FIGURE_OUTPUTS = dict(
    png=report_files(f"{RESULTS}/figures/{{}}.png", "report/{}.rst", FIGURE_NAMES),
    pdf=[f"{RESULTS}/figures/{name}.pdf" for name in FIGURE_NAMES],
)
PLOT_COMMAND = (
    "python -m analysis figures --results {params.results} --analysis {params.analysis}"
    " --expected {params.expected} --out-dir {params.out_dir}"
)


rule plot_figures:
    input:
        summary=f"{RESULTS}/summary.parquet",
        intermediate=[f"{RESULTS}/analysis/{name}.parquet" for name in INTERMEDIATE],
    output:
        **FIGURE_OUTPUTS,
    log:
        f"{RESULTS}/logs/plot_figures.log",
    benchmark:
        f"{RESULTS}/benchmarks/plot_figures.tsv"
    conda:
        "../envs/analysis.yaml"
    threads: 1
    params:
        expected=" ".join(RUNS),
        analysis=analysis_arg(),
        results=lambda wildcards, input: Path(input.summary).parent,
        out_dir=lambda wildcards, output: Path(output.png[0]).parent,
    shell:
        f"{PLOT_COMMAND} > {{log}} 2>&1"


# The files of `analyse` and `plot_figures`, which the default target takes from those two rules.
ruleorder: analyse > figures
ruleorder: plot_figures > figures


# `snakemake figures`: no inputs, so no train job; the finished runs are parameters, so the job reruns
# when one finished (again) or the config changed since the files were written, else has nothing to do.
rule figures:
    output:
        **ANALYSIS_OUTPUTS,
        **FIGURE_OUTPUTS,
        progress=f"{RESULTS}/figures/progress.png",
    log:
        analyse=f"{RESULTS}/logs/analyse.log",
        plot=f"{RESULTS}/logs/plot_figures.log",
    benchmark:
        f"{RESULTS}/benchmarks/figures.tsv"
    localrule: True
    conda:
        "../envs/analysis.yaml"
    threads: 1
    params:
        run_dirs=finished_run_dirs,
        finished=finished_runs_stamp,
        expected=" ".join(RUNS),
        analysis=analysis_arg(),
        results=lambda wildcards, output: Path(output.parquet).parent,
        out_dir=lambda wildcards, output: Path(output.png[0]).parent,
        progress=progress_args(),
        running=running_steps(),
    shell:
        f"{ANALYSE_COMMAND} > {{log.analyse}} 2>&1 && {PLOT_COMMAND} > {{log.plot}} 2>&1"
        " && python -m analysis progress --out {output.progress} {params.progress} >> {log.plot} 2>&1"
