"""On the real single-node SLURM cluster (.ci/slurm-up): a run with `resources.gpus: 0, processes: 2`
is one job of two tasks (two gloo ranks) that trains the run to done.json. Skipped without SLURM
unless REQUIRE_SLURM is set (then it fails)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.float_order import trainer_env
from tests.models import tiny_base_model
from tests.runs import tiny_run_config
from tests.workflow import ROOT
from trainer.contract import rundir

pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.usefixtures("need_slurm")]
RUN = "voting-math-tiny-shared-s0"


def test_slurm_job_runs_two_ranks_to_done(tmp_path_factory, tmp_path: Path) -> None:
    base_model = tiny_base_model(tmp_path_factory)
    rc = tiny_run_config(
        RUN,
        {"max_steps": 2, "eval_every": 2, "save_every": 2, "eval_problems": 8},
        backend="slurm",
        partition="debug",
        signal_delay_s=10,
        poll_interval_s=1,
    )
    rc["resources"].update(gpus=0, processes=2, cpus=2, mem_gb=2, time_min=10)  # 1 core per rank
    run_dir = tmp_path / RUN
    cmd = [
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
    proc = subprocess.run(cmd, cwd=ROOT, env=trainer_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = json.loads((run_dir / rundir.DONE_JSON).read_text())
    assert done["steps_done"] == 2
    job_id = json.loads((run_dir / rundir.WORK_DIR / "job.json").read_text())["job_id"]
    folder = run_dir / rundir.WORK_DIR / "submitit"
    for rank in (0, 1):  # one SLURM task per rank, each in the process group of two
        log = (folder / f"{job_id}_{rank}_log.err").read_text()
        assert f"rank {rank} of 2 (gloo" in log, log[-2000:]
    train = pd.read_parquet(run_dir / rundir.TRAIN_PARQUET)
    assert sorted(zip(train["step"], train["role"])) == [(s, r) for s in (1, 2) for r in ("aggregator", "generator")]
