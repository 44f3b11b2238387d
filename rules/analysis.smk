# The whole analysis in one job (one Python start for every run, not one per run): every run's logs
# in, the per-run summary, the paper's summary table and the study's question tables out.
from analysis.names import INTERMEDIATE, TABLES

# shared with the `figures` re-analysis rule (figures.smk)
ANALYSIS_OUTPUTS = dict(
    parquet=f"{RESULTS}/summary.parquet",
    csv=f"{RESULTS}/summary.csv",
    md=f"{RESULTS}/summary.md",
    tex=f"{RESULTS}/summary.tex",
    intermediate=[f"{RESULTS}/analysis/{name}.parquet" for name in INTERMEDIATE],
    tables=[f"{RESULTS}/tables/{name}.{ext}" for name in TABLES for ext in ("csv", "md")],
    report_tables=report_files(f"{RESULTS}/tables/{{}}.html", "report/table_{}.rst", TABLES),
)
ANALYSE_COMMAND = (
    "python -m analysis analyse --results {params.results} --analysis {params.analysis}"
    " --expected {params.expected} -- {params.run_dirs}"
)


rule analyse:
    input:
        analysis_inputs(RUNS),
    output:
        **ANALYSIS_OUTPUTS,
    log:
        f"{RESULTS}/logs/analyse.log",
    benchmark:
        f"{RESULTS}/benchmarks/analyse.tsv"
    conda:
        "../envs/analysis.yaml"
    threads: 1
    params:
        run_dirs=" ".join(run_dir(r) for r in RUNS),
        expected=" ".join(RUNS),
        analysis=analysis_arg(),
        results=lambda wildcards, output: Path(output.parquet).parent,
    shell:
        f"{ANALYSE_COMMAND} > {{log}} 2>&1"
