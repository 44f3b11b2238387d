"""End to end through Snakemake: the tiny base model, real GRPO runs, summary and figures.

The local run uses the `local` launcher (a submitit subprocess); the SLURM test submits real
jobs to the single-node cluster that .ci/slurm-up starts.
"""

from __future__ import annotations

import json
import os
import subprocess

import pandas as pd
import pytest
import yaml

from tests.float_order import PERTURB
from tests.workflow import ROOT, copy_workflow, snakemake
from trainer.contract.rundir import TRAIN_SCHEMA

SHORT = {
    "max_steps": 4,
    "eval_every": 2,
    "save_every": 2,
    "prompts_per_step": 4,
    "num_generations": 4,
    "eval_problems": 40,
    "samples_per_eval": 4,
}


def ci_config(matrix: dict, backend: str = "local") -> dict:
    """config.yaml with a small matrix, a short tiny warm start and a short schedule."""
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    cfg["matrices"]["ci"] = {
        "workflows": [],
        "tasks": ["math"],
        "scales": ["tiny"],
        "policies": ["shared"],
        "seeds": [0],
        "single_baseline": False,
        **matrix,
    }
    cfg["matrix"] = "ci"
    cfg["scales"]["tiny"]["tiny"]["warm_start_steps"] = 200
    tiny = next(o for o in cfg["overrides"] if o["match"] == {"scale": "tiny"})
    tiny["training"].update(SHORT)
    if PERTURB["warm_start_micro_batches"]:  # TEST_FLOAT_ORDER (docs/testing.md)
        cfg["scales"]["tiny"]["tiny"]["warm_start_micro_batches"] = PERTURB["warm_start_micro_batches"]
        tiny["training"]["micro_batch_tokens"] = PERTURB["micro_batch_tokens"]
    # one- and two-digit operands: after 200 warm-start steps the model gets some one-digit sums
    # right, so GRPO's rewards vary (on the demo's two-digit sums it is still at 0)
    for spec in [tiny["tasks"]["math"]["train"], *tiny["tasks"]["math"]["eval"]]:
        spec["params"]["min_digits"] = 1
    cfg["launcher"].update(backend=backend, poll_interval_s=1)
    return {k: cfg[k] for k in ("matrices", "matrix", "scales", "overrides", "launcher")}


@pytest.fixture(scope="session")
def pipeline_dir(tmp_path_factory):
    """A workflow copy whose tiny base model is built once for the session."""
    return copy_workflow(tmp_path_factory.mktemp("pipeline"))


def write_yaml(path, obj) -> str:
    path.write_text(yaml.safe_dump(obj))
    return str(path)


@pytest.mark.slow
@pytest.mark.trajectory
def test_voting_math_run_end_to_end(pipeline_dir):
    cfg = write_yaml(pipeline_dir / "ci.yaml", ci_config({"workflows": ["voting"]}))
    snakemake("--configfile", cfg, "--cores", "2", cwd=pipeline_dir, timeout=1200)
    run = pipeline_dir / "results" / "runs" / "voting-math-tiny-shared-s0"
    for name in ("config.json", "train.parquet", "eval.parquet", "samples.parquet", "done.json"):
        assert (run / name).exists(), name
    config = json.loads((run / "config.json").read_text())
    done = json.loads((run / "done.json").read_text())
    assert done["steps_done"] == done["steps_expected"] == SHORT["max_steps"]
    assert done["config_hash"] == config["config_hash"]
    train = pd.read_parquet(run / "train.parquet")
    assert set(TRAIN_SCHEMA.names) <= set(train.columns)
    assert sorted(train["step"].unique()) == [1, 2, 3, 4]
    assert set(train["role"]) == {"generator", "aggregator"}
    assert len(train) == 2 * SHORT["max_steps"]  # a row per (step, role)
    print(f"margins: steps with reward variance {int((train['reward_std'] > 0).sum())} of {len(train)}")
    assert train["reward_mean"].nunique() > 1 or (train["reward_std"] > 0).any(), "rewards never vary"
    assert (train["grad_norm"] > 0).any()
    evals = pd.read_parquet(run / "eval.parquet")
    assert list(evals["step"]) == [0, 2, 4] and (evals["n"] == SHORT["eval_problems"]).all()
    assert {"voter_accuracy", "aggregator_accuracy", "vote_agreement"} <= set(evals.columns)
    job = json.loads((run / "work" / "job.json").read_text())
    assert job["backend"] == "local"
    summary = pd.read_parquet(pipeline_dir / "results" / "summary.parquet")
    assert list(summary["run"]) == ["voting-math-tiny-shared-s0"]
    assert (pipeline_dir / "results" / "figures" / "accuracy_curves.png").stat().st_size > 1000


@pytest.mark.slow
@pytest.mark.slurm
def test_slurm_profile_runs_real_jobs(need_slurm, pipeline_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    subprocess.run(
        [os.sys.executable, "-m", "trainer", "install-profile", "--repo", str(pipeline_dir)],
        check=True,
        env={**os.environ},
    )
    cfg = ci_config({"workflows": [], "single_baseline": True, "seeds": [0, 1]}, backend="slurm")
    cfg["launcher"]["partition"] = "debug"
    overrides = write_yaml(pipeline_dir / "ci_slurm.yaml", cfg)
    snakemake(
        "--profile",
        "slurm",
        "--configfile",
        "profiles/slurm/paper.yaml",
        overrides,
        "--cores",
        "4",
        cwd=pipeline_dir,
        timeout=1500,
    )
    job_ids = set()
    for seed in (0, 1):
        run = pipeline_dir / "results" / "runs" / f"single-math-tiny-shared-s{seed}"
        done = json.loads((run / "done.json").read_text())
        assert done["steps_done"] == SHORT["max_steps"]
        job = json.loads((run / "work" / "job.json").read_text())
        assert job["backend"] == "slurm" and job["job_id"].isdigit()
        job_ids.add(job["job_id"])
        shown = subprocess.run(["scontrol", "show", "job", job["job_id"]], capture_output=True, text=True).stdout
        assert f"JobName=single-math-tiny-shared-s{seed}" in shown or not shown  # purged after MinJobAge
    assert len(job_ids) == 2
