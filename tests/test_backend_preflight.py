"""Errors before work: a rollout backend that cannot start fails at
`snakemake -n` and at job start before the model loads, naming the key and the run."""

from __future__ import annotations

import copy

import pytest

from tests.local_qwen3 import real_scale_config, save_random_qwen3, small_vocab_tokenizer
from tests.workflow import ROOT, snakemake
from trainer.contract.config import ConfigError
from trainer.contract.runid import parse_run_id
from trainer.rl import preflight
from trainer.sweep import preflight as matrix_preflight
from trainer.sweep.config import load_yaml, resolve_run_config

RUN = "voting-math-qwen3-0.6b-isolated-s0"


@pytest.fixture
def no_vllm(monkeypatch):
    """vLLM not importable, whatever this environment has."""
    monkeypatch.setattr(preflight, "vllm_import_error", lambda: "the vllm package is not installed here")


def run_config(training: dict, resources: dict | None = None) -> dict:
    config = copy.deepcopy(load_yaml(ROOT / "config.yaml"))
    config["training"].update(training)
    rc = resolve_run_config(config, parse_run_id(RUN))
    rc["resources"].update(resources or {})
    return rc


def test_vllm_missing_fails_at_job_start_before_the_model_loads(no_vllm, tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    model_dir = save_random_qwen3(tmp_path / "model", small_vocab_tokenizer(), hidden_size=32)
    cfg = real_scale_config(model_dir, RUN, tmp_path / "run", training={"generation_backend": "vllm"})
    loads = []
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", lambda *a, **k: loads.append(a))
    from trainer.rl.train import Trainer

    with pytest.raises(ConfigError, match=rf"run {RUN}: training\.generation_backend: 'vllm' needs the vllm"):
        Trainer(cfg, tmp_path / "run")
    assert loads == []  # no model was loaded


@pytest.mark.skipif(preflight.vllm_import_error() is None, reason="vllm imports here: snakemake -n would pass")
def test_snakemake_dry_run_fails_naming_the_key_where_vllm_is_missing():
    proc = snakemake("-n", "--config", "training={generation_backend: vllm}", check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "training.generation_backend: 'vllm' needs the vllm package" in out
    assert "run voting-math-tiny-isolated-s0:" in out  # names the runs
    assert "rule train" not in proc.stdout


def test_lora_rank_above_max_lora_rank_is_a_named_error(monkeypatch):
    monkeypatch.setattr(preflight, "vllm_import_error", lambda: None)
    assert preflight.run_problems(run_config({"generation_backend": "vllm"})) == []
    assert preflight.served_lora_rank({"lora": {"r": 12}}) == 16  # rounded up to a rank vLLM serves
    rc = run_config({"generation_backend": "vllm", "vllm": {"max_lora_rank": 32}})  # config.yaml's r is 64
    with pytest.raises(ConfigError, match=r"training\.lora\.r: rank 64 is above training\.vllm\.max_lora_rank \(32\)"):
        preflight.check_run(rc)
    rc = run_config({"generation_backend": "vllm", "lora": {"r": 1024, "lora_alpha": 32}})
    with pytest.raises(ConfigError, match=r"training\.lora\.r: rank 1024"):
        preflight.check_run(rc)
    # the hf backend has no such limit
    assert preflight.run_problems(run_config({"lora": {"r": 1024, "lora_alpha": 32}})) == []


def test_tensor_parallel_size_above_the_jobs_gpus_is_a_named_error(monkeypatch):
    monkeypatch.setattr(preflight, "vllm_import_error", lambda: None)
    rc = run_config({"generation_backend": "vllm", "vllm": {"tensor_parallel_size": 4}}, {"gpus": 2})
    with pytest.raises(
        ConfigError,
        match=r"training\.vllm\.tensor_parallel_size: 4 is above the job's GPUs "
        r"\(resources\.gpus: 2\)",
    ):
        preflight.check_run(rc)
    rc = run_config({"generation_backend": "vllm", "vllm": {"tensor_parallel_size": 1}}, {"gpus": 2})
    assert preflight.run_problems(rc) == []  # within the GPUs, and one engine per rank (TP > 1: test_gpu_vllm_rules)


def test_check_matrix_lists_every_run_that_cannot_start(no_vllm):
    config = copy.deepcopy(load_yaml(ROOT / "config.yaml"))
    config["training"]["generation_backend"] = "vllm"
    with pytest.raises(ConfigError) as e:
        matrix_preflight.check_matrix(config)
    lines = [x for x in str(e.value).splitlines() if "training.generation_backend" in x]
    assert len(lines) == 14  # the demo matrix's runs, each named
