"""The cost plan (`python -m trainer plan`): GPU-hours per scale and in total from measured rates
or stated estimates, the runs that would not fit their time limit, bad configs refused before any work."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from tests.workflow import ROOT, snakemake
from trainer.models.size import STUDY_MODELS, parameter_count
from trainer.sweep.config import expand_matrix, load_yaml, resolve_run_config
from trainer.sweep.cost import predict_run, wall_time_s
from trainer.sweep.measured import find_rate, load_rates, record_rate, slug

GPU = "NVIDIA H100 80GB HBM3"
# slow on purpose: a 0.6B run at these rates takes longer than its time limit allows
RATE_06B = {
    "model": "Qwen/Qwen3-0.6B",
    "backend": "hf",
    "generate_tokens_per_s": 900.0,
    "update_tokens_per_s": 3000.0,
    "measured_by": "bench_rollout",
}


def plan(tmp_path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer",
            "plan",
            "--config-file",
            str(ROOT / "config.yaml"),
            "--results",
            str(tmp_path / "results"),
            "--measured",
            str(tmp_path / "measured"),
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_paper_plan_names_measured_and_estimated_scales_and_runs_that_do_not_fit(tmp_path):
    record_rate(RATE_06B, GPU, tmp_path / "measured")
    proc = plan(tmp_path, "--config", "matrix=paper", "--gpu", "H100")
    out = proc.stdout
    df = pd.read_csv(tmp_path / "results" / "plan.csv")
    assert len(df) == 126 and df["run_s"].notna().all()
    # per scale: measured for 0.6B (from the file), stated estimates for the others
    assert "qwen3-0.6b: step time measured for its model (lengths at their maxima) on NVIDIA H100" in out
    for scale in ("qwen3-1.7b", "qwen3-4b"):
        assert f"{scale}: step time ESTIMATE:" in out and "no measurement on H100" in out
    # GPU-hours per scale and in total, as the table and the total line print them
    per_scale = df.groupby("scale")["gpu_hours"].sum()
    for scale, hours in per_scale.items():
        assert any(line.split()[:1] == [scale] and f"{hours:.2f}" in line for line in out.splitlines()), scale
    assert f"{df['gpu_hours'].sum():.1f} GPU-hours" in out
    # the step time of a measured run, by hand: calls x max tokens, generated then trained, over its GPUs
    config = load_yaml(ROOT / "config.yaml")
    run = next(r for r in expand_matrix(config, "paper") if str(r) == "voting-math-qwen3-0.6b-shared-s0")
    cfg = resolve_run_config(config, run)
    t = cfg["training"]
    tokens = t["prompts_per_step"] * t["num_generations"] * 4 * t["max_completion_length"]  # voting: 3 voters + 1
    by_hand = (tokens / 900 + tokens / 3000) / cfg["resources"]["gpus"]
    assert df.set_index("run").loc[str(run), "step_s"] == pytest.approx(by_hand)
    # the slow 0.6B measurement does not fit: those runs are named, and only runs that do not fit
    late = df[df["fits"] == False]  # noqa: E712
    assert len(late) and set(late["scale"]) >= {"qwen3-0.6b"}
    assert f"{len(late)} runs would NOT fit their time limit" in out
    for r in late.itertuples():
        assert f"  {r.run}: " in out and r.run_s > r.time_limit_s * 0.5


def test_a_measurement_of_the_runs_workflow_and_task_comes_first_and_sets_lengths(tmp_path):
    d = tmp_path / "measured"
    record_rate(RATE_06B, GPU, d)
    specific = {
        **RATE_06B,
        "workflow": "voting",
        "task": "math",
        "calls_per_episode": 2.0,
        "tokens_per_call": 100.0,
        "generate_tokens_per_s": 2000.0,
        "startup_s": 30.0,
        "checkpoint_s": 1.0,
    }
    record_rate(specific, GPU, d)
    record_rate({**specific, "generate_tokens_per_s": 4000.0}, GPU, d)  # replaces the entry of the same key
    rates = load_rates(d)
    assert len(rates) == 2 and (d / f"{slug(GPU)}.json").exists()
    assert find_rate(rates, "h100", "Qwen/Qwen3-0.6B", "hf", "voting", "math")["generate_tokens_per_s"] == 4000.0
    assert find_rate(rates, "h100", "Qwen/Qwen3-0.6B", "hf", "eval_opt", "math")["generate_tokens_per_s"] == 900.0
    assert find_rate(rates, "A100", "Qwen/Qwen3-0.6B", "hf", "voting", "math") is None
    config = load_yaml(ROOT / "config.yaml")
    run = next(r for r in expand_matrix(config, "paper") if str(r) == "voting-math-qwen3-0.6b-shared-s0")
    cfg = resolve_run_config(config, run)
    p = predict_run(cfg, find_rate(rates, "h100", "Qwen/Qwen3-0.6B", "hf", "voting", "math"))
    t = cfg["training"]
    assert p["calls_per_step"] == t["prompts_per_step"] * t["num_generations"] * 2.0
    assert p["tokens_per_step"] == p["calls_per_step"] * 100.0


def test_estimates_from_parameters_and_wall_time_longest_first():
    # Qwen3-0.6B's published size is 0.6B parameters (0.44B without embeddings)
    assert parameter_count(STUDY_MODELS["Qwen/Qwen3-0.6B"]) == pytest.approx(0.596e9, rel=0.01)
    assert parameter_count(STUDY_MODELS["Qwen/Qwen3-4B"]) == pytest.approx(4.02e9, rel=0.01)
    assert wall_time_s([3, 3, 2, 2, 2], 2) == 7  # 3+2+2 | 3+2
    assert wall_time_s([5, 1, 1], 4) == 5


@pytest.mark.parametrize(
    "args, key",
    [
        (["--config", "launcher={bogus: 1}"], "bogus"),
        (["--config", "matrix=nope"], "nope"),
        (["--matrix", "nope"], "--matrix"),
        (["--config", "training={learning_rate: fast}"], "learning_rate"),
    ],
)
def test_plan_with_a_bad_config_fails_before_any_work_naming_the_key(tmp_path, args, key):
    proc = plan(tmp_path, "--measure", *args, check=False)
    assert proc.returncode == 2 and key in proc.stderr, proc.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "measured").exists()


def test_snakemake_plan_prints_and_writes_the_plan(workdir):
    proc = snakemake("plan", "--cores", "3", "--config", "matrix=paper", cwd=workdir)
    out = proc.stdout + proc.stderr
    assert "per scale:" in out and "GPU-hours" in out and "rule train" not in out
    assert "running 3 at a time" in out  # Snakemake's cores: the train jobs it runs at once
    df = pd.read_csv(workdir / "results" / "plan.csv")
    assert len(df) == 126
    log = (workdir / "results" / "logs" / "plan.log").read_text()
    assert "total: 126 runs" in log


@pytest.mark.slow
def test_plan_measure_records_each_workflow_and_task_and_the_plan_then_rests_on_it(tmp_path, tmp_path_factory):
    import shutil

    from tests.models import tiny_base_model

    model = tmp_path / "results" / "models" / "tiny" / "model.json"
    model.parent.mkdir(parents=True)
    shutil.copy(tiny_base_model(tmp_path_factory), model)
    matrix = {
        "workflows": ["voting"],
        "tasks": ["math"],
        "scales": ["tiny"],
        "policies": ["shared", "isolated"],
        "seeds": [0],
        "single_baseline": True,
    }
    schedule = {"max_steps": 4, "prompts_per_step": 2, "num_generations": 2, "eval_problems": 8}
    overrides = "overrides=" + json.dumps(
        load_yaml(ROOT / "config.yaml")["overrides"] + [{"match": {"scale": "tiny"}, "training": schedule}]
    )
    proc = plan(tmp_path, "--measure", "--config", "matrix=m", f"matrices={json.dumps({'m': matrix})}", overrides)
    rates = load_rates(tmp_path / "measured")
    assert sorted((r["workflow"], r["task"]) for r in rates) == [("single", "math"), ("voting", "math")]
    for r in rates:
        assert r["model"] == "tiny" and r["measured_by"] == "plan --measure" and r["run"].endswith("-shared-s0")
        assert r["generate_tokens_per_s"] > 0 and r["update_tokens_per_s"] > 0 and r["startup_s"] > 0
        assert 0 < r["tokens_per_call"] <= 64 and r["eval_tokens_per_episode"] > 0
    voting = next(r for r in rates if r["workflow"] == "voting")
    assert 3 <= voting["calls_per_episode"] <= 4  # 3 voters, and the aggregator where it runs
    df = pd.read_csv(tmp_path / "results" / "plan.csv")
    assert len(df) == 3 and df["source"].str.startswith("measured for its workflow and task").all(), proc.stdout
    assert not (tmp_path / "results" / "runs").exists()  # nothing of the sweep touched
