"""The plan as a gate: a run whose one eval chunk (the unit a requeued eval resumes from) cannot fit
its job even at the device's peak rates, or at a rate measured for the device, is refused at submission naming the run, the eval and the fix; one that
only the stated estimate says will not fit is warned about with how to measure; `allow_unfit_runs` lets a
refused run through. Disk per run in the plan."""

from __future__ import annotations

import copy

import pytest

from tests.workflow import ROOT, snakemake
from trainer.contract.config import ConfigError
from trainer.models.size import checkpoint_bytes, lora_parameters
from trainer.sweep.config import expand_matrix, load_yaml, resolve_run_config
from trainer.sweep.disk import run_disk
from trainer.sweep.gate import assess, check_matrix
from trainer.sweep.measured import load_rates

FIXES = ("eval_problems", "resources.gpus", "resources.time_min", "generation_backend: vllm")


def one_run_config(
    workflow: str = "voting", task: str = "math", scale: str = "qwen3-4b", time_min: int = 1440, **training
) -> dict:
    """config.yaml with a one-run matrix (`gate`) of the paper's models and settings."""
    config = copy.deepcopy(load_yaml(ROOT / "config.yaml"))
    config["matrices"]["gate"] = {
        "workflows": [workflow],
        "tasks": [task],
        "scales": [scale],
        "policies": ["shared"],
        "seeds": [0],
        "single_baseline": False,
    }
    config["matrix"] = "gate"
    config["scales"][scale]["resources"]["time_min"] = time_min
    config["training"].update(training)
    return config


def the_run(config: dict) -> tuple[str, dict, dict]:
    run = next(iter(expand_matrix(config)))
    return str(run), resolve_run_config(config, run), config["scales"][run.scale]


def test_an_eval_chunk_that_cannot_fit_even_at_peak_is_refused_naming_run_eval_and_fix():
    # voting x math at 4B: its eval's lower bound is hours on 2 H100s; in chunks of 256 problems (the
    # default) a requeued job resumes it chunk by chunk, and a chunk fits an hour's job
    run, rc, scale = the_run(one_run_config(time_min=60))
    row = assess(run, rc, scale, [], "H100")
    assert row["eval_bound_s"] > 3600 > row["eval_chunk_bound_s"] and row["gate"] != "refuse", row["gate_reason"]
    config = one_run_config(time_min=60, eval_chunk_problems=2000)  # one chunk a split: it cannot
    run, rc, scale = the_run(config)
    row = assess(run, rc, scale, [], "H100")
    assert row["gate"] == "refuse" and row["eval_chunk_bound_s"] > 3600 and row["eval_one_s"] > 0
    with pytest.raises(ConfigError) as e:
        check_matrix(config, rates=[])
    msg = str(e.value)
    assert run in msg and "one eval" in msg and "even at H100's peak" in msg and "allow_unfit_runs: true" in msg
    assert all(fix in msg for fix in FIXES), msg
    assert "one eval (dapo_holdout 1500 (ASSUMED) + aime2025 30 problems x 5 samples = 7650 episodes)" in msg


def test_a_run_over_only_the_estimate_warns_naming_the_run_and_how_to_measure(capsys):
    run, rc, scale = the_run(one_run_config(workflow="eval_opt", task="code", scale="qwen3-1.7b"))
    row = assess(run, rc, scale, [], "H100")
    assert row["eval_chunk_bound_s"] < row["eval_chunk_s"]  # the estimate is slower than the bound: a window between
    time_min = int((row["eval_chunk_bound_s"] + row["eval_chunk_s"]) / 2 / 60)
    config = one_run_config(workflow="eval_opt", task="code", scale="qwen3-1.7b", time_min=time_min)
    notes = check_matrix(config, rates=[])
    assert len(notes) == 1 and notes[0].startswith("warning: ") and run in notes[0]
    assert "ESTIMATE" in notes[0] and "plan --measure" in notes[0] and "device_check" in notes[0]
    assert run in capsys.readouterr().err


def test_a_measured_rate_that_cannot_fit_one_eval_is_refused():
    config = one_run_config(workflow="eval_opt", task="code", scale="qwen3-1.7b")
    run, rc, scale = the_run(config)
    slow = {
        "model": "Qwen/Qwen3-1.7B",
        "backend": "hf",
        "generate_tokens_per_s": 50.0,
        "update_tokens_per_s": 500.0,
        "device": "NVIDIA H100 80GB HBM3",
    }
    assert assess(run, rc, scale, [], "H100")["gate"] == "ok"
    row = assess(run, rc, scale, [slow], "H100")
    assert row["gate"] == "refuse" and "at the rate measured on H100" in row["gate_reason"]
    with pytest.raises(ConfigError, match=run):
        check_matrix(config, rates=[slow])


def test_the_override_lets_a_refused_run_through_and_still_names_it(capsys):
    config = one_run_config(time_min=60, eval_chunk_problems=2000)
    config["allow_unfit_runs"] = True
    notes = check_matrix(config, rates=[])
    run = the_run(config)[0]
    assert len(notes) == 1 and "refused but submitted (allow_unfit_runs: true)" in notes[0] and run in notes[0]
    assert run in capsys.readouterr().err


def test_vllm_rows_without_measured_lengths_only_warn():
    # a vLLM row stops at its end: max_completion_length is no lower bound of its tokens
    config = one_run_config(time_min=60, generation_backend="vllm", eval_chunk_problems=2000)
    run, rc, scale = the_run(config)
    row = assess(run, rc, scale, [], "H100")
    assert row["gate"] == "warn" and row["eval_chunk_bound_s"] > 3600


def test_the_paper_matrix_as_shipped_passes_its_gate():
    config = load_yaml(ROOT / "config.yaml")
    config["matrix"] = "paper"
    notes = check_matrix(config, rates=load_rates())
    assert not [n for n in notes if not n.startswith("warning: ")]


def test_disk_of_a_4b_isolated_orchestrator_workers_run():
    config = one_run_config(workflow="orch_workers", scale="qwen3-4b")
    config["matrices"]["gate"]["policies"] = ["isolated"]
    run, rc, scale = the_run(config)
    shape = {
        "vocab_size": 151936,
        "hidden_size": 2560,
        "intermediate_size": 9728,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
    }
    assert lora_parameters(shape, 64) == pytest.approx(132e6, rel=0.01)  # ~132M: Qwen3-4B's LoRA r64, all linear layers
    one = checkpoint_bytes(rc)  # 3 policies x (adapter, state.pt's copy, AdamW's two moments) in float32
    assert one == 3 * lora_parameters(shape, 64) * 16
    disk = run_disk(rc, scale)
    keep = rc["training"]["keep_last"]
    assert disk["checkpoint_gb"] == pytest.approx(one / 1e9)
    assert disk["disk_peak_gb"] == pytest.approx(((keep + 1) * one + one / 4) / 1e9)


def test_snakemake_dry_run_refuses_and_the_override_submits(workdir):
    short = "scales={qwen3-4b: {model: Qwen/Qwen3-4B, dtype: bfloat16, resources: {gpus: 2, cpus: 16, mem_gb: 192, time_min: 60}}}"
    whole = "training={eval_chunk_problems: 2000}"  # an eval split in one chunk
    proc = snakemake("-n", "--config", "matrix=paper", short, whole, cwd=workdir, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "voting-math-qwen3-4b-shared-s0: one eval" in out and "eval_problems" in out
    ok = snakemake("-n", "--config", "matrix=paper", short, whole, "allow_unfit_runs=true", cwd=workdir)
    assert "refused but submitted" in ok.stderr and "voting-math-qwen3-4b-shared-s0" in ok.stdout


def test_an_update_micro_batch_over_the_devices_memory_warns():
    run, rc, scale = the_run(one_run_config(workflow="single", task="code", scale="qwen3-0.6b"))
    assert assess(run, rc, scale, [], "H100")["memory_gib"] < 80
    run, rc, scale = the_run(
        one_run_config(workflow="single", task="code", scale="qwen3-0.6b", micro_batch_tokens=65536)
    )
    row = assess(run, rc, scale, [], "H100")  # 32 rows x 2048 completion positions x 151,936 logits
    assert row["memory_gib"] > 80 and row["gate"] == "warn" and "training.micro_batch_tokens" in row["gate_reason"]
