# The base model of each scale, one training job per run (submitted by trainer.launch, so a local
# rule: on a cluster it only submits and waits), and `snakemake status`. A run reruns only when
# its hashed config changed (HASHED_PARAMS: the reason names the keys), never for launcher or
# resources; such a run refuses to resume; to start it afresh (its old checkpoints and logs are
# moved aside, never deleted):
#   snakemake --config restart=RUN            (or restart=all)


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


# Login-node downloads before the first train job that needs them: train jobs run offline and
# their configs pin the commit these rules resolve (a local path: its content hash).
rule prefetch_model:
    output:
        f"{RESULTS}/prefetch/models/{{scale}}.json",
    log:
        f"{RESULTS}/logs/prefetch/models/{{scale}}.log",
    localrule: True
    conda:
        "../envs/trainer.yaml"
    params:
        model=lambda w: shlex.quote(config["scales"][w.scale]["model"]),
        revision=prefetch_model_revision,
    shell:
        "python -m trainer prefetch --model {params.model}{params.revision} --out {output} 2>&1 | tee {log}"


rule prefetch_dataset:
    output:
        f"{RESULTS}/prefetch/datasets/{{dataset}}.json",
    log:
        f"{RESULTS}/logs/prefetch/datasets/{{dataset}}.log",
    localrule: True
    conda:
        "../envs/trainer.yaml"
    params:
        dataset=hub_dataset_id,
        configs=hub_dataset_configs,
        revision=hub_dataset_revision,
    shell:
        "python -m trainer prefetch --dataset {params.dataset} {params.configs}{params.revision} --out {output} "
        "2>&1 | tee {log}"


rule train:
    input:
        base_model=base_model_json,
        prefetch=prefetch_inputs,
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
        **HASHED_PARAMS,
        run_config=run_config_arg,
        run_dir=run_dir_param,
        restart=restart_flag,
        env=scale_env,
    shell:
        "{params.env} env HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 python -m trainer launch"
        " --run-config {params.run_config} --base-model {input.base_model} --prefetched {input.prefetch}"
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


# `snakemake plan` (with the same --profile and --config as the sweep): the cost plan of the matrix,
# results/plan.csv: model calls, tokens and seconds per step, GPU-hours, runs that would not fit their time
# limit; from trainer/sweep/measured_rates/ (or stated estimates). Schedules nothing else.
rule plan:
    log:
        f"{RESULTS}/logs/plan.log",
    localrule: True
    conda:
        "../envs/trainer.yaml"
    threads: 1
    params:
        config=status_config_arg,
        results=RESULTS,
        parallel=lambda wildcards: runs_at_once(),
    shell:
        "python -m trainer plan --config-json {params.config} --results {params.results}"
        " --parallel {params.parallel} 2>&1 | tee {log}"


# The plan beside what the finished runs took (predicted over actual per run), for the HTML report.
rule plan_vs_actual:
    input:
        [run_file(r, "done.json") for r in RUNS],
    output:
        csv=f"{RESULTS}/tables/plan_vs_actual.csv",
        html=report(
            f"{RESULTS}/tables/plan_vs_actual.html",
            caption="report/table_plan_vs_actual.rst",
            category="Cost plan",
        ),
    log:
        f"{RESULTS}/logs/plan_vs_actual.log",
    localrule: True
    conda:
        "../envs/trainer.yaml"
    threads: 1
    params:
        config=status_config_arg,
        results=lambda wildcards, output: Path(output.csv).parent.parent,
        parallel=lambda wildcards: runs_at_once(),
    shell:
        "python -m trainer plan --config-json {params.config} --results {params.results} --out {output.csv}"
        " --parallel {params.parallel}"
        " --html {output.html} > {log} 2>&1"
