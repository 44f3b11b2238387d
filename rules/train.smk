# The base model of each scale, and one training job per run (submitted by trainer.launch).


rule base_model:
    output:
        f"{RESULTS}/models/{{scale}}/model.json",
    conda:
        "../envs/trainer.yaml"
    log:
        f"{RESULTS}/logs/base_model/{{scale}}.log",
    params:
        spec=base_model_arg,
    threads: 2
    shell:
        "python -m trainer base-model --spec {params.spec} --out {output} 2>&1 | tee {log}"


rule train:
    input:
        base_model=base_model_json,
    output:
        config=f"{RESULTS}/runs/{{run}}/config.json",
        train=f"{RESULTS}/runs/{{run}}/train.parquet",
        eval=f"{RESULTS}/runs/{{run}}/eval.parquet",
        samples=f"{RESULTS}/runs/{{run}}/samples.parquet",
        done=f"{RESULTS}/runs/{{run}}/done.json",
    conda:
        "../envs/trainer.yaml"
    log:
        f"{RESULTS}/logs/train/{{run}}.log",
    params:
        run_config=run_config_arg,
        run_dir=lambda w: run_dir(w.run),
    threads: 1
    shell:
        "python -m trainer launch --run-config {params.run_config} --base-model {input.base_model}"
        " --run-dir {params.run_dir} 2>&1 | tee {log}"


rule train_all:
    input:
        [run_file(r, "done.json") for r in RUNS],
