# The base model of each scale, one training job per run (submitted by trainer.launch, so a local
# rule: on a cluster it only submits and waits), and
# `snakemake status`. A run whose config changed refuses to resume; to start it afresh:
#   snakemake --config restart=RUN            (or restart=all; a finished run also needs --forcerun)


rule base_model:
    output:
        f"{RESULTS}/models/{{scale}}/model.json",
    log:
        f"{RESULTS}/logs/base_model/{{scale}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/base_model/{{scale}}.tsv"
    conda:
        "../envs/trainer.yaml"
    threads: 2
    params:
        spec=base_model_arg,
        env=scale_env,
    shell:
        "{params.env} python -m trainer base-model --spec {params.spec} --out {output} 2>&1 | tee {log}"


rule train:
    input:
        base_model=base_model_json,
    output:
        config=f"{RESULTS}/runs/{{run}}/config.json",
        train=f"{RESULTS}/runs/{{run}}/train.parquet",
        eval=f"{RESULTS}/runs/{{run}}/eval.parquet",
        samples=f"{RESULTS}/runs/{{run}}/samples.parquet",
        done=f"{RESULTS}/runs/{{run}}/done.json",
    log:
        f"{RESULTS}/logs/train/{{run}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/train/{{run}}.tsv"
    priority: train_priority
    localrule: True
    conda:
        "../envs/trainer.yaml"
    threads: 1
    params:
        run_config=run_config_arg,
        run_dir=lambda w: run_dir(w.run),
        restart=restart_flag,
        env=scale_env,
    shell:
        "{params.env} python -m trainer launch --run-config {params.run_config} --base-model {input.base_model}"
        " --run-dir {params.run_dir} {params.restart} 2>&1 | tee {log}"


rule train_all:
    input:
        [run_file(r, "done.json") for r in RUNS],


# `snakemake status` (add --nolock while a sweep runs in this directory): every run of the
# matrix and where it stands; schedules nothing else.
rule status:
    log:
        f"{RESULTS}/logs/status.log",
    localrule: True
    conda:
        "../envs/trainer.yaml"
    threads: 1
    params:
        config=status_config_arg,
        results=RESULTS,
    shell:
        "python -m trainer status --config-json {params.config} --results {params.results} 2>&1 | tee {log}"
