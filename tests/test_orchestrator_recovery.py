"""Getting back when the orchestrator dies: a local `snakemake` SIGKILLed with its whole process
group after the run's first checkpoint leaves a stale lock; `python -m trainer status` names it and the
command that clears it; docs/cluster.md's commands (`snakemake --unlock`, then the same command) resume the
run, whose train and eval logs then equal an uninterrupted run's (time columns aside)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest
import yaml

from tests.float_order import trainer_env
from tests.resilience import assert_same_logs, published_logs, wait_for
from tests.runs import workflow_copy
from tests.workflow import BIN, ROOT, snakemake
from trainer.contract import rundir
from trainer.rl.run import run_training

RUN = "voting-math-tiny-isolated-s0"
SCHEDULE = {
    "max_steps": 6,
    "eval_every": 2,
    "save_every": 2,
    "keep_last": 2,
    "prompts_per_step": 4,
    "num_generations": 4,
    "eval_problems": 12,
    "samples_per_eval": 2,
}


def one_run_config() -> dict:
    """config.yaml narrowed to RUN with a short schedule, run by the local launcher."""
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    cfg["matrices"]["one"] = {
        "workflows": ["voting"],
        "tasks": ["math"],
        "scales": ["tiny"],
        "policies": ["isolated"],
        "seeds": [0],
        "single_baseline": False,
    }
    cfg["matrix"] = "one"
    tiny = next(o for o in cfg["overrides"] if o["match"] == {"scale": "tiny"})
    tiny["training"].update(SCHEDULE)
    cfg["launcher"].update(backend="local", poll_interval_s=0.2)
    return {k: cfg[k] for k in ("matrices", "matrix", "overrides", "launcher")}


@pytest.fixture
def sweep_dir(tmp_path, tmp_path_factory):
    """A workflow copy with the session's tiny base model in place of the scale's (no rebuild)."""
    d = tmp_path / "sweep"
    d.mkdir()
    workflow_copy(d, tmp_path_factory)
    (d / "one.yaml").write_text(yaml.safe_dump(one_run_config()))
    return d


SWEEP = ("--configfile", "one.yaml", "--cores", "1", "train_all")


def status_text(d) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "trainer", "status", "--config-file", "config.yaml", "--config-file", "one.yaml"],
        cwd=d,
        capture_output=True,
        text=True,
        timeout=120,
        env=trainer_env(),
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_killed_snakemake_leaves_a_lock_status_names_it_and_the_documented_commands_resume(sweep_dir, tmp_path):
    d, run_dir = sweep_dir, sweep_dir / "results" / "runs" / RUN
    log = open(tmp_path / "snakemake.log", "w")
    proc = subprocess.Popen(
        [str(BIN / "snakemake"), *SWEEP],
        cwd=d,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**trainer_env(), "PATH": f"{BIN}:{os.environ['PATH']}"},
    )
    try:
        wait_for(
            lambda: (run_dir / rundir.WORK_DIR / rundir.CHECKPOINTS_DIR / "step-000002").exists(),
            proc,
            600,
            "the first checkpoint",
            tmp_path / "snakemake.log",
        )
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the login node lost: snakemake, its launcher and the trainer
        proc.wait(timeout=60)
    assert not (run_dir / rundir.DONE_JSON).exists(), "the kill landed after the run finished"
    assert list((d / ".snakemake" / "locks").glob("*.lock")), "a killed Snakemake leaves its locks"

    text = status_text(d)
    assert "STALE LOCK" in text and "snakemake --unlock" in text and "then run the same command again" in text
    assert "interrupted" in text  # the run: started, no live job, a rerun resumes it

    again = snakemake(*SWEEP, cwd=d, check=False)
    assert again.returncode != 0 and "cannot be locked" in again.stdout + again.stderr  # what a user meets first

    snakemake("--configfile", "one.yaml", "--unlock", cwd=d)  # docs/cluster.md's restart commands
    assert "STALE LOCK" not in status_text(d)
    resumed = snakemake(*SWEEP, cwd=d)
    train_log = (d / "results" / "logs" / "train" / f"{RUN}.log").read_text()
    assert "resumed from step-00000" in train_log, resumed.stderr[-3000:]

    reference = tmp_path / "reference"
    reference.mkdir()
    shutil.copy(run_dir / rundir.CONFIG_JSON, reference / rundir.CONFIG_JSON)
    run_training(reference)
    ours, theirs = published_logs(run_dir), published_logs(reference)
    assert_same_logs({k: ours[k] for k in ("train", "eval")}, {k: theirs[k] for k in ("train", "eval")})


def test_no_stale_lock_without_lock_files_or_while_a_snakemake_runs_here(tmp_path):
    from trainer.sweep.status import stale_lock_message

    assert stale_lock_message(tmp_path) is None
    (tmp_path / ".snakemake" / "locks").mkdir(parents=True)
    (tmp_path / ".snakemake" / "locks" / "0.input.lock").write_text("")
    assert "STALE LOCK" in stale_lock_message(tmp_path)
    fake = tmp_path / "bin" / "snakemake"  # a live process named snakemake in this directory holds the lock
    fake.parent.mkdir()
    fake.symlink_to(shutil.which("sleep"))
    holder = subprocess.Popen([str(fake), "30"], cwd=tmp_path)
    try:
        wait_for(lambda: stale_lock_message(tmp_path) is None, holder, 10, "the holder to be seen")
    finally:
        holder.kill()
        holder.wait()
    assert "STALE LOCK" in stale_lock_message(tmp_path)


def test_the_profiles_keep_snakemakes_locking():
    """Two orchestrators on one directory stay impossible: no profile turns the lock off."""
    for path in (ROOT / "profiles").rglob("*.yaml"):
        settings = yaml.safe_load(path.read_text()) or {}
        assert not settings.get("nolock") and "--nolock" not in path.read_text(), path
