# The study's figures, rendered from the analysis tables alone.
from analysis.names import FIGURES as FIGURE_NAMES


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
    shell:
        "python -m analysis figures --results {params.results} --analysis {params.analysis}"
        " --expected {params.expected} --out-dir {params.results}/figures > {log} 2>&1"
