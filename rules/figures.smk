# The study's figures, rendered from the analysis tables alone, and the `figures` target: the
# analysis and these figures again over the runs finished so far, never training (see Snakefile).
from analysis.names import FIGURES as FIGURE_NAMES

PLOT_COMMAND = (
    "python -m analysis figures --results {params.results} --analysis {params.analysis}"
    " --expected {params.expected} --out-dir {params.out_dir}"
)


rule plot_figures:
    input:
        summary=f"{RESULTS}/summary.parquet",
        intermediate=[f"{RESULTS}/analysis/{name}.parquet" for name in INTERMEDIATE],
    output:
        png=[
            report(f"{RESULTS}/figures/{name}.png", caption=f"report/{name}.rst", category=category)
            for name, category in FIGURE_NAMES.items()
        ],
        pdf=[f"{RESULTS}/figures/{name}.pdf" for name in FIGURE_NAMES],
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


# `snakemake figures`: no inputs and no outputs, so it is the whole DAG when named and always runs;
# the run directories it reads are those finished now (parameters, not inputs: nothing to train).
rule figures:
    log:
        analyse=f"{RESULTS}/logs/analyse.log",
        plot=f"{RESULTS}/logs/plot_figures.log",
    localrule: True
    conda:
        "../envs/analysis.yaml"
    threads: 1
    params:
        run_dirs=finished_run_dirs,
        expected=" ".join(RUNS),
        analysis=analysis_arg(),
        results=RESULTS,
        out_dir=f"{RESULTS}/figures",
    shell:
        f"{ANALYSE_COMMAND} > {{log.analyse}} 2>&1 && {PLOT_COMMAND} > {{log.plot}} 2>&1"
