# One summary row per run, gathered into results/summary.parquet (parquet in, parquet out).


rule summarize_run:
    input:
        summary_inputs,
    output:
        f"{RESULTS}/summaries/{{run}}.parquet",
    conda:
        "../envs/analysis.yaml"
    log:
        f"{RESULTS}/logs/summarize_run/{{run}}.log",
    params:
        run_dir=lambda w: run_dir(w.run),
        analysis=analysis_arg(),
    shell:
        "python -m analysis summarize --run-dir {params.run_dir} --analysis {params.analysis}"
        " --out {output} > {log} 2>&1"


rule collect:
    input:
        [f"{RESULTS}/summaries/{r}.parquet" for r in ANALYSED_RUNS],
    output:
        parquet=f"{RESULTS}/summary.parquet",
        csv=f"{RESULTS}/summary.csv",
    conda:
        "../envs/analysis.yaml"
    log:
        f"{RESULTS}/logs/collect.log",
    params:
        expected=" ".join(RUNS),
    shell:
        "python -m analysis collect --expected {params.expected} --out {output.parquet} --csv {output.csv}"
        " -- {input} > {log} 2>&1"
