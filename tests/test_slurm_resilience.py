"""On the real single-node SLURM cluster (.ci/slurm-up): a run longer than its wall time is requeued
by submitit and finishes whole; a launcher killed while its job runs re-attaches on rerun instead of
submitting a second job; a run whose job was scancelled is resubmitted on rerun and resumes from its
newest checkpoint. Skipped without SLURM unless REQUIRE_SLURM is set (then it fails).

Each test finds its jobs by the run's tag (the job comment, `trainer.launch.job_tag`: run id and a
hash of the run directory), never by the job name, which every test's run shares."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.float_order import trainer_env
from tests.models import tiny_base_model
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
from trainer.contract import rundir
from trainer.sweep.launch import LIVE_SLURM_STATES, job_tag

pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.usefixtures("need_slurm")]
RUN = "single-math-tiny-shared-s0"


def slurm_config(training: dict[str, Any], time_min: int = 10, max_num_timeout: int = 3) -> dict[str, Any]:
    """A tiny run on the slurm backend, partition debug, a short signal delay and fast polling."""
    rc = tiny_run_config(
        RUN,
        training,
        backend="slurm",
        partition="debug",
        signal_delay_s=10,
        poll_interval_s=1,
        max_num_timeout=max_num_timeout,
    )
    rc["resources"].update(cpus=1, mem_gb=2, time_min=time_min)
    return rc


def launch_cmd(rc: dict[str, Any], base_model: Path, run_dir: Path) -> list[str]:
    """The command the train rule runs (rules/train.smk)."""
    return [
        sys.executable,
        "-m",
        "trainer",
        "launch",
        "--run-config",
        json.dumps(rc),
        "--base-model",
        str(base_model),
        "--run-dir",
        str(run_dir),
    ]


def paced(pause_s: float) -> dict[str, str]:
    """Environment that makes every training step last at least `pause_s` longer (the trainer's test
    hook; sbatch hands the launcher's environment to the job), so that a test's window (a kill, a
    wall-time signal) does not depend on how fast this machine trains."""
    return {"TRAINER_TEST_PAUSE_AT": "step", "TRAINER_TEST_PAUSE_S": str(pause_s)}


def start_launcher(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    """The launcher in its own process group, its output appended to `log`."""
    with open(log, "a") as out:
        return subprocess.Popen(
            cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=trainer_env(**env), start_new_session=True
        )


def run_jobs(run_dir: Path) -> list[tuple[str, str]]:
    """(job id, state) of every job squeue lists with the run's tag, ended ones included (SLURM keeps
    them MinJobAge seconds); other tests' jobs, of other run directories, are never among them."""
    tag = job_tag(RUN, run_dir)
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-o", "%i|%T|%k"], capture_output=True, text=True, check=True
    ).stdout
    rows = [line.split("|", 2) for line in out.splitlines() if line.count("|") >= 2]
    return [(job_id, state) for job_id, state, comment in rows if comment == tag]


def live_jobs(run_dir: Path) -> list[str]:
    """Ids of the run's jobs that are queued or running."""
    return [job_id for job_id, state in run_jobs(run_dir) if state in LIVE_SLURM_STATES]


def job_record(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / rundir.WORK_DIR / "job.json"
    return json.loads(path.read_text()) if path.exists() else None


def job_log(run_dir: Path) -> str:
    """All submitit stderr logs of the run's jobs."""
    return "".join(p.read_text(errors="replace") for p in (run_dir / rundir.WORK_DIR / "submitit").glob("*.err"))


def cancel_run_jobs(run_dir: Path) -> None:
    """scancel the run's live jobs (by its tag and its job.json), and only those."""
    ids = set(live_jobs(run_dir)) | ({job_record(run_dir)["job_id"]} if job_record(run_dir) else set())
    if ids:
        subprocess.run(["scancel", *sorted(ids)], capture_output=True)


def checkpoint_steps(run_dir: Path) -> list[int]:
    """Steps of the run's whole checkpoints (work/checkpoints/step-N)."""
    return sorted(int(p.name.split("-")[1]) for p in (run_dir / rundir.WORK_DIR / "checkpoints").glob("step-*"))


def finish(proc: subprocess.Popen, log: Path, timeout_s: float) -> None:
    """Wait for the launcher; fail with its log tail unless it exits 0."""
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"launcher still running after {timeout_s}s\n{log.read_text()[-3000:]}") from e
    assert rc == 0, f"launcher exited {rc}\n{log.read_text()[-3000:]}"


def test_timeout_requeues_and_finishes_whole(tmp_path_factory, tmp_path: Path) -> None:
    """Wall time 1 min, training longer: submitit requeues on the signal; all steps once, done.json."""
    base = tiny_base_model(tmp_path_factory)
    run_dir, log = tmp_path / RUN, tmp_path / "launch.log"
    # >= 2 s a step: 30 steps never fit in one 1-min job (signalled 10 s before its end, after ~15 s
    # of start-up); about 2 jobs here, and requeues to spare for a slower, loaded machine
    steps = 30
    rc = slurm_config({"max_steps": steps, "save_every": 2, "eval_every": 10}, time_min=1, max_num_timeout=6)
    t0 = time.time()
    try:
        proc = start_launcher(launch_cmd(rc, base, run_dir), log, paced(2.0))
        finish(proc, log, timeout_s=360)
    finally:
        cancel_run_jobs(run_dir)
    took = time.time() - t0
    text = job_log(run_dir)
    assert "DUE TO JOB REQUEUE" in text, f"SLURM never requeued the job:\n{text[-3000:]}"
    assert "signalled: stopping now" in text, text[-3000:]
    assert "resumed from step-" in text, f"no resume after the requeue:\n{text[-3000:]}"
    assert_nothing_partial(run_dir)
    train = pd.read_parquet(run_dir / rundir.TRAIN_PARQUET)
    assert len(train) == train["step"].nunique() * train["role"].nunique()
    assert sorted(train["step"].unique()) == list(range(1, steps + 1))
    assert list(pd.read_parquet(run_dir / rundir.EVAL_PARQUET)["step"]) == [0, 10, 20, 30]
    print(f"timeout+requeue run took {took:.0f}s")


def test_killed_launcher_reattaches(tmp_path_factory, tmp_path: Path) -> None:
    """SIGKILL the launcher while its job RUNs; the rerun re-attaches: one job, same id, run done."""
    base = tiny_base_model(tmp_path_factory)
    run_dir, log = tmp_path / RUN, tmp_path / "launch.log"
    rc = slurm_config({"max_steps": 8, "save_every": 2, "eval_every": 4})
    cmd = launch_cmd(rc, base, run_dir)
    try:
        first = start_launcher(cmd, log, paced(1.0))  # >= 8 s of training: the job outlives the kill
        wait_for(
            lambda: job_record(run_dir) is not None and any(s == "RUNNING" for _, s in run_jobs(run_dir)),
            first,
            120,
            "the job RUNNING",
            log,
        )
        job_id = job_record(run_dir)["job_id"]
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        assert run_jobs(run_dir) == [(job_id, "RUNNING")]
        second = start_launcher(cmd, log, paced(1.0))
        wait_for(lambda: "re-attaching to SLURM job" in log.read_text(), second, 60, "re-attach", log)
        assert [j for j, _ in run_jobs(run_dir)] == [job_id], "a second job was submitted"
        finish(second, log, timeout_s=240)
        assert [j for j, _ in run_jobs(run_dir)] == [job_id], "a second job was submitted"
    finally:
        cancel_run_jobs(run_dir)
    assert job_record(run_dir)["job_id"] == job_id
    assert log.read_text().count("submitted slurm job") == 1
    assert f"re-attaching to SLURM job {job_id}" in log.read_text()
    assert_nothing_partial(run_dir)


def test_cancelled_job_resubmits_and_resumes(tmp_path_factory, tmp_path: Path) -> None:
    """scancel the job once it has checkpointed and SIGKILL its launcher; the rerun submits a new job,
    which resumes from the newest checkpoint: every step logged once, nothing partial."""
    base = tiny_base_model(tmp_path_factory)
    run_dir, log = tmp_path / RUN, tmp_path / "launch.log"
    steps = 30  # >= 0.5 s a step: the job cannot finish in scancel's KillWait (5 s) after step 2
    rc = slurm_config({"max_steps": steps, "save_every": 2, "eval_every": 10})
    cmd = launch_cmd(rc, base, run_dir)
    try:
        first = start_launcher(cmd, log, paced(0.5))
        wait_for(
            lambda: job_record(run_dir) is not None and checkpoint_steps(run_dir) != [],
            first,
            180,
            "a first checkpoint",
            log,
        )
        old_id = job_record(run_dir)["job_id"]
        subprocess.run(["scancel", old_id], check=True)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        wait_for(lambda: not live_jobs(run_dir), None, 60, f"job {old_id} to end after scancel")
        saved = checkpoint_steps(run_dir)
        assert saved and saved[-1] < steps, f"the job finished before the scancel ({saved}); lengthen the run"
        second = start_launcher(cmd, log, paced(0.5))
        wait_for(lambda: job_record(run_dir)["job_id"] != old_id, second, 60, "a new job", log)
        new_id = job_record(run_dir)["job_id"]
        finish(second, log, timeout_s=240)
    finally:
        cancel_run_jobs(run_dir)
    assert sorted(j for j, _ in run_jobs(run_dir)) == sorted([old_id, new_id])
    text = log.read_text()
    assert text.count("submitted slurm job") == 2 and f"submitted slurm job {new_id}" in text, text[-3000:]
    assert "re-attaching" not in text, text[-3000:]
    new_log = (run_dir / rundir.WORK_DIR / "submitit" / f"{new_id}_0_log.err").read_text(errors="replace")
    assert f"resumed from step-{saved[-1]:06d}" in new_log, f"not resumed from step {saved[-1]}:\n{new_log[-3000:]}"
    assert_nothing_partial(run_dir)
    train = pd.read_parquet(run_dir / rundir.TRAIN_PARQUET)
    assert len(train) == train["step"].nunique() * train["role"].nunique()
    assert sorted(train["step"].unique()) == list(range(1, steps + 1))
    assert list(pd.read_parquet(run_dir / rundir.EVAL_PARQUET)["step"]) == [0, 10, 20, 30]


def test_requeue_mid_step_resumes_after_the_last_completed_step(tmp_path_factory, tmp_path: Path) -> None:
    """`scontrol requeue` (SLURM's preemption path: SIGTERM, SIGKILL KillWait = 5 s later) in the middle
    of step 3, a rollout longer than that grace and no periodic checkpoint: the job abandons the
    rollout, checkpoints step 2 on the signal, the requeued job resumes at step 3, and the final
    logs equal an uninterrupted run's."""
    base = tiny_base_model(tmp_path_factory)
    run_dir, log = tmp_path / RUN, tmp_path / "launch.log"
    rc = slurm_config({"max_steps": 4, "save_every": 10, "eval_every": 2})
    t0 = time.time()
    try:  # each generation call lasts >= 8 s (interruptible by the stop flag): a step outlasts KillWait
        proc = start_launcher(
            launch_cmd(rc, base, run_dir), log, {"TRAINER_TEST_PAUSE_AT": "generate", "TRAINER_TEST_PAUSE_S": "8"}
        )
        wait_for(lambda: progress_step(run_dir) >= 2, proc, 240, "step 2 done", log)
        assert checkpoint_steps(run_dir) == [], "a checkpoint before the signal: the test shows nothing"
        subprocess.run(["scontrol", "requeue", job_record(run_dir)["job_id"]], check=True)
        finish(proc, log, timeout_s=300)
    finally:
        cancel_run_jobs(run_dir)
    took = time.time() - t0
    text = job_log(run_dir)
    assert "SIGTERM" in text and "checkpoint step-000002 holds every completed step" in text, text[-3000:]
    assert "resumed from step-000002" in text, text[-3000:]
    assert_nothing_partial(run_dir)
    reference = tmp_path / "reference" / RUN
    reference.mkdir(parents=True)
    shutil.copy(run_dir / rundir.CONFIG_JSON, reference / rundir.CONFIG_JSON)
    ref_log = tmp_path / "reference.log"
    assert start_trainer(reference, ref_log).wait(timeout=300) == 0, ref_log.read_text()[-3000:]
    assert_same_logs(published_logs(reference), published_logs(run_dir))
    print(f"requeued run took {took:.0f}s")
