# The study's figures, rendered from the analysis tables alone.
from analysis.names import FIGURES as FIGURE_NAMES


def progress_args():
    """`python -m analysis progress`'s arguments: every run directory of the matrix, and --include-running
    under `--config include_running=true` (issue 22: curves of running runs)."""
    flag = "--include-running " if config.get("include_running") else ""
    return flag + "-- " + " ".join(run_dir(r) for r in RUNS)


def running_steps():
    """Where the running runs stand (work/progress.json), under include_running: a params change, so a
    later `snakemake figures --config include_running=true` redraws once a run has moved on."""
    if not config.get("include_running"):
        return ""
    steps = [(r, Path(run_dir(r), "work", "progress.json")) for r in RUNS if not Path(run_file(r, "done.json")).exists()]
    return " ".join(f"{r}@{json.loads(p.read_text())['step']}" for r, p in steps if p.exists())


rule figures:
    input:
        summary=f"{RESULTS}/summary.parquet",
        intermediate=[f"{RESULTS}/analysis/{name}.parquet" for name in INTERMEDIATE],
    output:
        png=[
            report(f"{RESULTS}/figures/{name}.png", caption=f"report/{name}.rst", category=category)
            for name, category in FIGURE_NAMES.items()
        ],
        pdf=[f"{RESULTS}/figures/{name}.pdf" for name in FIGURE_NAMES],
        progress=f"{RESULTS}/figures/progress.png",
    conda:
        "../envs/analysis.yaml"
    benchmark:
        f"{RESULTS}/benchmarks/figures.tsv"
    log:
        f"{RESULTS}/logs/figures.log",
    params:
        expected=" ".join(RUNS),
        analysis=analysis_arg(),
        results=RESULTS,
        progress=progress_args(),
        running=running_steps(),
    shell:
        "python -m analysis figures --results {params.results} --analysis {params.analysis}"
        " --expected {params.expected} --out-dir {params.results}/figures > {log} 2>&1"
        " && python -m analysis progress --out {output.progress} {params.progress} >> {log} 2>&1"
