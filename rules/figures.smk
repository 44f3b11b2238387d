# The study's figures, rendered from parquet alone.


rule figures:
    input:
        summary=f"{RESULTS}/summary.parquet",
    output:
        report(FIGURES[0], caption="report/accuracy_curves.rst", category="Accuracy"),
        FIGURES[1],
    conda:
        "../envs/analysis.yaml"
    log:
        f"{RESULTS}/logs/figures.log",
    params:
        runs_dir=f"{RESULTS}/runs",
        expected=" ".join(RUNS),
    shell:
        "python -m analysis figures --summary {input.summary} --runs-dir {params.runs_dir} --expected {params.expected}"
        " --out-dir {RESULTS}/figures > {log} 2>&1"
