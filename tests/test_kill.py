"""SIGKILL a tiny training process at points chosen from its progress, rerun it, and compare its logs
with an uninterrupted run's: equal up to the time columns, nothing partial left behind.

The kill points: after step 1 (before any checkpoint), while the step-4 checkpoint is half-written
(its `.step-000004.tmp` directory exists), and while the logs are being published (train.parquet
is there, done.json is not). TRAINER_TEST_PAUSE_AT widens those two windows (a test hook of
trainer.train) so that the kill lands inside them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from tests.float_order import trainer_env
from tests.resilience import (
    assert_nothing_partial,
    assert_same_logs,
    progress_step,
    published_logs,
    start_trainer,
    wait_for,
)
from tests.runs import tiny_run_config
from tests.workflow import ROOT
from trainer.rl.run import run_training
from trainer.sweep.launch import write_run_config

RUN = "voting-math-tiny-isolated-s0"
SCHEDULE = {"max_steps": 6, "eval_every": 2, "save_every": 2, "keep_last": 2, "eval_problems": 12}
PAUSE = {"TRAINER_TEST_PAUSE_AT": "checkpoint,publish", "TRAINER_TEST_PAUSE_S": "1.5"}
STEP_TIMEOUT_S = 300  # generous: other tests may share the CPUs


def status_of(results, run: str) -> dict:
    """`python -m trainer status` for the one run, as the CLI prints it (JSON)."""
    matrix = {
        "workflows": ["voting"],
        "tasks": ["math"],
        "scales": ["tiny"],
        "policies": ["isolated"],
        "seeds": [0],
        "single_baseline": False,
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer",
            "status",
            "--config-file",
            str(ROOT / "config.yaml"),
            "--config",
            "matrix=one",
            f"matrices={json.dumps({'one': matrix})}",
            "--results",
            str(results),
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=trainer_env(),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [r["run"] for r in rows] == [run]
    return rows[0]


def kill(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


def assert_published_whole(run_dir) -> None:
    """Right after a kill: whatever published parquet exists is a whole file."""
    for path in run_dir.glob("*.parquet"):
        pq.read_table(path)


@pytest.mark.slow
def test_sigkill_at_progress_points_then_rerun_equals_an_uninterrupted_run(tmp_path, base_model):
    reference = tmp_path / "reference"
    write_run_config(tiny_run_config(RUN, SCHEDULE), base_model, reference)
    run_training(reference)

    results = tmp_path / "results"
    run_dir = results / "runs" / RUN
    write_run_config(tiny_run_config(RUN, SCHEDULE), base_model, run_dir)
    ckpts = run_dir / "work" / "checkpoints"
    log = tmp_path / "train.log"
    assert status_of(results, RUN)["state"] == "not started"  # config written, nothing run yet

    # 1. after step 1, before the first checkpoint: the rerun starts from zero
    proc = start_trainer(run_dir, log, **PAUSE)
    wait_for(lambda: progress_step(run_dir) >= 1, proc, STEP_TIMEOUT_S, "step 1", log)
    kill(proc)
    assert not list(ckpts.glob("step-*")), "killed before the first checkpoint"
    assert_published_whole(run_dir)
    row = status_of(results, RUN)
    assert row["state"] == "interrupted" and row["step"] >= 1

    # 2. while the step-4 checkpoint is being written: it is discarded whole, step 2 is resumed
    proc = start_trainer(run_dir, log, **PAUSE)
    wait_for(
        lambda: (ckpts / ".step-000004.tmp" / "policies").exists(),
        proc,
        STEP_TIMEOUT_S,
        "the step-4 checkpoint write",
        log,
    )
    kill(proc)
    assert [p.name for p in ckpts.glob("step-*")] == ["step-000002"]
    assert not (ckpts / ".step-000004.tmp" / "state.pt").exists(), "the kill landed inside the write"
    assert_published_whole(run_dir)

    # 3. while publishing: train.parquet is out, done.json not yet; the rerun republishes
    proc = start_trainer(run_dir, log, **PAUSE)
    wait_for(lambda: (run_dir / "train.parquet").exists(), proc, STEP_TIMEOUT_S, "publishing", log)
    kill(proc)
    assert not (run_dir / "done.json").exists(), "the kill landed before done.json"
    assert_published_whole(run_dir)
    assert sorted(p.name for p in ckpts.glob("step-*")) == ["step-000004", "step-000006"]  # keep_last = 2

    proc = start_trainer(run_dir, log)
    assert proc.wait(timeout=STEP_TIMEOUT_S) == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert "removing incomplete checkpoint" in text and "resumed from step-000002" in text
    assert "resumed from step-000006" in text
    assert_same_logs(published_logs(reference), published_logs(run_dir))
    assert_nothing_partial(reference)
    assert_nothing_partial(run_dir)
    assert status_of(results, RUN)["state"] == "done"


@pytest.mark.slow
def test_a_second_trainer_on_a_busy_run_fails_at_once(tmp_path, base_model):
    run_dir = tmp_path / "busy"
    write_run_config(tiny_run_config(RUN, SCHEDULE), base_model, run_dir)
    log = tmp_path / "busy.log"
    first = start_trainer(run_dir, log, **PAUSE)
    try:
        wait_for(lambda: progress_step(run_dir) >= 0, first, STEP_TIMEOUT_S, "the first trainer to start", log)
        second = subprocess.run(
            [sys.executable, "-m", "trainer", "train", "--run-dir", str(run_dir)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env=trainer_env(),
            timeout=120,
        )
        assert second.returncode != 0
        assert "RunBusyError" in second.stderr and "another process trains this run" in second.stderr
    finally:
        kill(first)
