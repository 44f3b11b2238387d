"""Every workflow x policy mode, really trained at the tiny scale through Snakemake (a short schedule).

One Snakemake invocation trains the 7 runs of one task (single shared; eval_opt, voting and
orch_workers shared and isolated) on the session's cached tiny base model; each run directory
must hold every file of the run-directory contract (docs/design.md) with rows for every role, and one run trained a
second time with the same seed must give identical logs up to the time columns.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.float_order import trainer_env
from tests.resilience import assert_same_logs, published_logs
from tests.runs import workflow_copy
from tests.workflow import ROOT, snakemake
from trainer.contract import rundir
from trainer.workflows import WORKFLOWS

SCHEDULE = {
    "max_steps": 2,
    "eval_every": 2,
    "save_every": 2,
    "prompts_per_step": 2,
    "num_generations": 2,
    "eval_problems": 4,
    "samples_per_eval": 2,
    "max_completion_length": 16,
}
WORKFLOW_NAMES = ["eval_opt", "voting", "orch_workers"]
RUNS = ["single-math-tiny-shared-s0"] + [
    f"{w}-math-tiny-{p}-s0" for w in WORKFLOW_NAMES for p in ("shared", "isolated")
]
RUN_FILES = (rundir.CONFIG_JSON, rundir.TRAIN_PARQUET, rundir.EVAL_PARQUET, rundir.SAMPLES_PARQUET, rundir.DONE_JSON)
REPEATED = "voting-math-tiny-isolated-s0"


def matrix_config() -> dict:
    """config.yaml restricted to the 7 runs of math at the tiny scale, with a very short schedule."""
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    cfg["matrices"]["tiny_matrix"] = {
        "workflows": WORKFLOW_NAMES,
        "tasks": ["math"],
        "scales": ["tiny"],
        "policies": ["shared", "isolated"],
        "seeds": [0],
        "single_baseline": True,
    }
    cfg["matrix"] = "tiny_matrix"
    tiny = next(o for o in cfg["overrides"] if o["match"] == {"scale": "tiny"})
    tiny["training"].update(SCHEDULE)
    tiny["resources"] = {**tiny.get("resources", {}), "cpus": 1}
    cfg["launcher"].update(backend="debug", poll_interval_s=1)  # in the launcher's process (local: test_pipeline)
    return {k: cfg[k] for k in ("matrices", "matrix", "overrides", "launcher")}


@pytest.fixture(scope="module")
def matrix_dir(tmp_path_factory) -> Path:
    """A workflow copy that ran the whole tiny matrix once, on the session's cached base model."""
    d = workflow_copy(tmp_path_factory.mktemp("matrix"), tmp_path_factory)  # no rebuild: the session's model
    (d / "matrix.yaml").write_text(yaml.safe_dump(matrix_config()))
    proc = snakemake("--configfile", "matrix.yaml", "--cores", "2", "train_all", cwd=d, timeout=900)
    assert "rule base_model" not in proc.stdout + proc.stderr, "the cached base model was rebuilt"
    return d


@pytest.mark.slow
def test_every_workflow_and_mode_writes_the_run_contract(matrix_dir):
    runs = matrix_dir / "results" / "runs"
    assert sorted(p.name for p in runs.iterdir()) == sorted(RUNS)
    for run in RUNS:
        workflow, policy = run.split("-")[0], run.split("-")[-2]
        d = runs / run
        for name in RUN_FILES:
            assert (d / name).exists(), f"{run}: no {name}"
        config = json.loads((d / rundir.CONFIG_JSON).read_text())
        done = json.loads((d / rundir.DONE_JSON).read_text())
        assert done["steps_done"] == done["steps_expected"] == SCHEDULE["max_steps"], run
        assert done["config_hash"] == config["config_hash"], run
        roles = WORKFLOWS[workflow].roles
        routing = {r: "shared" if policy == "shared" else r for r in roles}
        train = pd.read_parquet(d / rundir.TRAIN_PARQUET)
        assert set(rundir.TRAIN_SCHEMA.names) <= set(train.columns), run
        assert sorted(train["step"].unique()) == [1, 2], run
        for step in (1, 2):
            rows = train[train["step"] == step]
            assert sorted(rows["role"]) == sorted(roles), f"{run} step {step}: roles {list(rows['role'])}"
        assert dict(zip(train["role"], train["policy"])) == routing, run
        assert (train["n_turns"] > 0).all(), run
        evals = pd.read_parquet(d / rundir.EVAL_PARQUET)
        assert set(rundir.EVAL_SCHEMA.names) <= set(evals.columns), run
        assert sorted(evals["step"]) == [0, SCHEDULE["max_steps"]], run
        assert (evals["n"] == SCHEDULE["eval_problems"]).all(), run
        samples = pd.read_parquet(d / rundir.SAMPLES_PARQUET)
        assert len(samples) > 0 and set(samples["role"]) == set(roles), run
        checkpoints = sorted(p.name for p in (d / rundir.WORK_DIR / "checkpoints").glob("step-*"))
        assert checkpoints == ["step-000002"], run
        assert (d / rundir.WORK_DIR / "checkpoints" / "step-000002" / "state.pt").exists(), run


@pytest.mark.slow
def test_same_seed_twice_gives_identical_logs(matrix_dir, tmp_path):
    first = matrix_dir / "results" / "runs" / REPEATED
    again = tmp_path / REPEATED
    again.mkdir()
    shutil.copy(first / rundir.CONFIG_JSON, again / rundir.CONFIG_JSON)
    proc = subprocess.run(
        [sys.executable, "-m", "trainer", "train", "--run-dir", str(again)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=trainer_env(),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    a, b = published_logs(first), published_logs(again)
    assert len(a["train"]) == 2 * len(WORKFLOWS["voting"].roles) and len(a["eval"]) == 2
    assert_same_logs({k: a[k] for k in ("train", "eval")}, {k: b[k] for k in ("train", "eval")})
