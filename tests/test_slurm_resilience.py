"""On the real single-node SLURM cluster (.ci/slurm-up): a run longer than its wall time is requeued
by submitit and finishes whole; a launcher killed while its job runs re-attaches on rerun instead of
submitting a second job. Skipped without SLURM unless REQUIRE_SLURM is set (then it fails)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.conftest import ROOT
from tests.resilience import assert_nothing_partial, tiny_base_model, tiny_run_config, trainer_env, wait_for
from trainer import schema

pytestmark = [pytest.mark.slow, pytest.mark.slurm]
RUN = "single-math-tiny-shared-s0"


def slurm_available() -> bool:
    """Whether sbatch exists and the controller answers."""
    import shutil

    return shutil.which("sbatch") is not None and subprocess.run(["sinfo"], capture_output=True).returncode == 0


@pytest.fixture(autouse=True)
def need_slurm() -> None:
    if not slurm_available():
        if os.environ.get("REQUIRE_SLURM"):
            pytest.fail("REQUIRE_SLURM is set but no SLURM cluster answers (run .ci/slurm-up)")
        pytest.skip("no SLURM cluster here (.ci/slurm-up starts one)")


def slurm_config(training: dict[str, Any], time_min: int = 10) -> dict[str, Any]:
    """A tiny run on the slurm backend, partition debug, a short signal delay and fast polling."""
    rc = tiny_run_config(RUN, training, backend="slurm", partition="debug", signal_delay_s=10,
                         poll_interval_s=1, max_num_timeout=3)
    rc["resources"].update(cpus=1, mem_gb=2, time_min=time_min)
    return rc


def launch_cmd(rc: dict[str, Any], base_model: Path, run_dir: Path) -> list[str]:
    """The command the train rule runs (rules/train.smk)."""
    return [sys.executable, "-m", "trainer", "launch", "--run-config", json.dumps(rc), "--base-model",
            str(base_model), "--run-dir", str(run_dir)]


def start_launcher(cmd: list[str], log: Path) -> subprocess.Popen:
    """The launcher in its own process group, its output appended to `log`."""
    with open(log, "a") as out:
        return subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=trainer_env(),
                                start_new_session=True)


def jobs_named(name: str) -> list[tuple[str, str]]:
    """(job id, state) of every job squeue lists under `name`, ended ones included."""
    out = subprocess.run(["squeue", "-h", "-t", "all", "-n", name, "-o", "%i|%T"], capture_output=True, text=True,
                         check=True).stdout
    return [tuple(line.split("|")) for line in out.split()]  # type: ignore[misc]


def job_record(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / schema.WORK_DIR / "job.json"
    return json.loads(path.read_text()) if path.exists() else None


def job_log(run_dir: Path) -> str:
    """All submitit stderr logs of the run's jobs."""
    return "".join(p.read_text(errors="replace") for p in (run_dir / schema.WORK_DIR / "submitit").glob("*.err"))


def cancel_all(name: str) -> None:
    subprocess.run(["scancel", "-n", name], check=True)


def finish(proc: subprocess.Popen, log: Path, timeout_s: float) -> None:
    """Wait for the launcher; fail with its log tail unless it exits 0."""
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"launcher still running after {timeout_s}s\n{log.read_text()[-3000:]}")
    assert rc == 0, f"launcher exited {rc}\n{log.read_text()[-3000:]}"


def test_timeout_requeues_and_finishes_whole(tmp_path_factory, tmp_path: Path) -> None:
    """Wall time 1 min, training longer: submitit requeues on the signal; all steps once, done.json."""
    base = tiny_base_model(tmp_path_factory)
    run_dir, log = tmp_path / RUN, tmp_path / "launch.log"
    steps = 60  # ~1 step/s here: the 1-min limit signals it around step 25
    rc = slurm_config({"max_steps": steps, "save_every": 2, "eval_every": 20}, time_min=1)
    t0 = time.time()
    try:
        proc = start_launcher(launch_cmd(rc, base, run_dir), log)
        finish(proc, log, timeout_s=360)
    finally:
        cancel_all(RUN)
    took = time.time() - t0
    text = job_log(run_dir)
    assert "DUE TO JOB REQUEUE" in text, f"SLURM never requeued the job:\n{text[-3000:]}"
    assert "signalled: stopping at the end of the step" in text, text[-3000:]
    assert "resumed from step-" in text, f"no resume after the requeue:\n{text[-3000:]}"
    assert_nothing_partial(run_dir)
    train = pd.read_parquet(run_dir / schema.TRAIN_PARQUET)
    assert len(train) == train["step"].nunique() * train["role"].nunique()
    assert sorted(train["step"].unique()) == list(range(1, steps + 1))
    assert list(pd.read_parquet(run_dir / schema.EVAL_PARQUET)["step"]) == [0, 20, 40, 60]
    print(f"timeout+requeue run took {took:.0f}s")


def test_killed_launcher_reattaches(tmp_path_factory, tmp_path: Path) -> None:
    """SIGKILL the launcher while its job RUNs; the rerun re-attaches: one job, same id, run done."""
    base = tiny_base_model(tmp_path_factory)
    run_dir, log = tmp_path / RUN, tmp_path / "launch.log"
    rc = slurm_config({"max_steps": 8, "save_every": 2, "eval_every": 4})
    cmd = launch_cmd(rc, base, run_dir)
    try:
        first = start_launcher(cmd, log)
        wait_for(lambda: job_record(run_dir) is not None and any(
            s == "RUNNING" for _, s in jobs_named(RUN)), first, 120, "the job RUNNING", log)
        job_id = job_record(run_dir)["job_id"]
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        assert [j for j, s in jobs_named(RUN) if s == "RUNNING"] == [job_id]
        second = start_launcher(cmd, log)
        wait_for(lambda: "re-attaching to SLURM job" in log.read_text(), second, 60, "re-attach", log)
        assert [j for j, _ in jobs_named(RUN)] == [job_id], "a second job was submitted"
        finish(second, log, timeout_s=240)
    finally:
        cancel_all(RUN)
    assert job_record(run_dir)["job_id"] == job_id
    assert log.read_text().count("submitted slurm job") == 1
    assert f"re-attaching to SLURM job {job_id}" in log.read_text()
    assert_nothing_partial(run_dir)
