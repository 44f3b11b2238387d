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


# `snakemake calibrate_warnings`: each early-warning detector's threshold chosen on the first half of the
# matrix's seeds and judged on the other half (docs/early_warnings.md), over the runs finished when the DAG
# is built (a parameter, as in `figures`: no train job enters); never part of the default target.
MATRIX_SEEDS = sorted({parse_run_id(r).seed for r in RUNS})
CALIBRATION_SEEDS = ",".join(str(s) for s in MATRIX_SEEDS[: max(1, len(MATRIX_SEEDS) // 2)])


rule calibrate_warnings:
    output:
        csv=f"{RESULTS}/warnings/heldout.csv",
        md=f"{RESULTS}/warnings/heldout.md",
        sweep=f"{RESULTS}/warnings/sweep.csv",
        png=f"{RESULTS}/warnings/calibration.png",
        yaml=f"{RESULTS}/warnings/early_warning.yaml",
        json=f"{RESULTS}/warnings/calibration.json",
    log:
        f"{RESULTS}/logs/calibrate_warnings.log",
    benchmark:
        f"{RESULTS}/benchmarks/calibrate_warnings.tsv"
    localrule: True
    conda:
        "../envs/analysis.yaml"
    threads: 1
    params:
        run_dirs=finished_run_dirs,
        finished=finished_runs_stamp,
        seeds=CALIBRATION_SEEDS,
        analysis=analysis_arg(),
        early_warning=shlex.quote(json.dumps(config["training"]["early_warning"], sort_keys=True)),
        out=lambda wildcards, output: Path(output.csv).parent,
    shell:
        "python -m analysis calibrate-warnings --calibrate-seeds {params.seeds} --analysis {params.analysis}"
        " --early-warning {params.early_warning} --out {params.out} -- {params.run_dirs} > {log} 2>&1"
