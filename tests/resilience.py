"""Helpers of the kill, resume and SLURM tests: a trainer started in a subprocess and waited on, and the
checks that a run's published files are whole and equal to another run's."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from tests.float_order import trainer_env
from tests.workflow import ROOT
from trainer.contract import rundir


def published_logs(run_dir: Path) -> dict[str, pd.DataFrame]:
    """train/eval/samples parquet of a run without the time columns (the only ones that may differ)."""
    out = {}
    for name in ("train", "eval", "samples"):
        df = pd.read_parquet(run_dir / f"{name}.parquet")
        out[name] = df.drop(columns=[c for c in rundir.TIME_COLUMNS if c in df.columns])
    return out


def assert_same_logs(a: dict[str, pd.DataFrame], b: dict[str, pd.DataFrame]) -> None:
    """Every log frame equal, exactly."""
    assert set(a) == set(b)
    for name in a:
        pd.testing.assert_frame_equal(a[name], b[name], check_exact=True, obj=name)


def temporaries(run_dir: Path) -> list[Path]:
    """Leftovers of interrupted atomic writes: `.NAME.tmp-PID` files and `.step-*` checkpoint dirs."""
    found = [*run_dir.glob(".*.tmp*"), *(run_dir / rundir.WORK_DIR).glob(".*.tmp*")]
    found += list((run_dir / rundir.WORK_DIR / "checkpoints").glob(".*"))
    return sorted(found)


def assert_nothing_partial(run_dir: Path, done: bool = True) -> None:
    """Nothing half-written among the run's files: no temporaries; every parquet (published and in
    each checkpoint) readable; every checkpoint whole; and, when `done`, done.json consistent with
    config.json and the parquet files (all steps, each (step, role) and (step, split) once)."""
    assert not temporaries(run_dir), f"{run_dir}: leftovers of interrupted writes: {temporaries(run_dir)}"
    for path in [*run_dir.glob("*.parquet"), *(run_dir / rundir.WORK_DIR).glob("checkpoints/step-*/*.parquet")]:
        pq.read_table(path)  # raises on a truncated file
    for ckpt in (run_dir / rundir.WORK_DIR / "checkpoints").glob("step-*"):
        for name in (
            "state.pt",
            rundir.CONFIG_JSON,
            rundir.TRAIN_PARQUET,
            rundir.EVAL_PARQUET,
            rundir.SAMPLES_PARQUET,
            "policies",
        ):
            assert (ckpt / name).exists(), f"{ckpt}: no {name}"
    if not done:
        return
    config = json.loads((run_dir / rundir.CONFIG_JSON).read_text())
    finished = json.loads((run_dir / rundir.DONE_JSON).read_text())
    steps = config["training"]["max_steps"]
    assert finished["config_hash"] == config["config_hash"], f"{run_dir}: done.json's hash is not config.json's"
    assert finished["steps_done"] == finished["steps_expected"] == steps
    train = pd.read_parquet(run_dir / rundir.TRAIN_PARQUET)
    evals = pd.read_parquet(run_dir / rundir.EVAL_PARQUET)
    assert sorted(train["step"].unique()) == list(range(1, steps + 1)), f"{run_dir}: train steps"
    assert not train.duplicated(["step", "role"]).any(), f"{run_dir}: a (step, role) row twice"
    assert not evals.duplicated(["step", "split"]).any(), f"{run_dir}: a (step, split) row twice"
    assert evals["step"].max() == steps and evals["step"].min() == 0
    samples = pd.read_parquet(run_dir / rundir.SAMPLES_PARQUET)
    assert set(samples["step"]) <= set(evals["step"])


def start_trainer(run_dir: Path, log: Path, **env: str) -> subprocess.Popen:
    """`python -m trainer train --run-dir RUN` in a subprocess, its output appended to `log`."""
    with open(log, "a") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "trainer", "train", "--run-dir", str(run_dir)],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=trainer_env(**env),
        )


def progress_step(run_dir: Path) -> int:
    """The step in work/progress.json (-1 before the trainer wrote it)."""
    path = run_dir / rundir.WORK_DIR / rundir.PROGRESS_JSON
    return json.loads(path.read_text())["step"] if path.exists() else -1


def wait_for(
    condition: Callable[[], bool], proc: subprocess.Popen | None, timeout_s: float, what: str, log: Path | None = None
) -> None:
    """Poll `condition` every 20 ms; fail if the process ends first or the timeout passes."""
    deadline = time.time() + timeout_s
    while not condition():
        tail = log.read_text()[-3000:] if log and log.exists() else ""
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process ended ({proc.returncode}) before {what}\n{tail}")
        if time.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}\n{tail}")
        time.sleep(0.02)


def copy_run_dir(src: Path, dst: Path) -> Path:
    """A copy of a run directory (to compare what happens to it under two histories)."""
    shutil.copytree(src, dst)
    return dst
