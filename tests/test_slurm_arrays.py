"""launcher.array_window_s (trainer/sweep/array_submit.py): the sweep's submissions go as SLURM job arrays.

Without a cluster: arrays are cut at MaxArraySize and split by executor parameters, MaxArraySize is read
from `scontrol show config` (or falls back, saying so), and only live launchers' requests are collected.
On the real single-node cluster (.ci/slurm-up; skipped without it unless REQUIRE_SLURM is set): five
launchers started together submit one array (one sbatch call) and each gets its own task's result; a
rejected sbatch fails every launcher of the array, naming its runs and sbatch's error. The jobs run
Sleeper (a second's sleep), never training: each launcher is the real `trainer.sweep.launch.launch`
with array_submit.TRAIN_JOB pointed at Sleeper.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from trainer.sweep import array_submit
from trainer.sweep.config import load_yaml, resolve_run_config
from trainer.sweep.runid import parse_run_id

SBATCH_SHIM = """#!/bin/sh
echo "$(date +%s.%N) sbatch $*" >> {log}
exec {real} "$@"
"""
LAUNCHER = """import json, sys
import trainer.sweep.array_submit as array_submit
array_submit.TRAIN_JOB = "tests.test_slurm_arrays:Sleeper"
from trainer.sweep.launch import launch
print(json.dumps(launch(json.loads(sys.argv[1]), sys.argv[2], sys.argv[3])))
"""


class Sleeper:
    """What each array task runs instead of training: a short sleep, then which run and task it was."""

    def __call__(self, run_dir: str) -> dict[str, Any]:
        time.sleep(1)
        return {"run_dir": run_dir, "task": f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ['SLURM_ARRAY_TASK_ID']}"}


def request(tag: str, at: float, partition: str = "debug") -> dict[str, Any]:
    return {"tag": tag, "requested_at": at, "max_num_timeout": 3, "job": array_submit.TRAIN_JOB,
            "params": {"partition": partition, "time": 5, "mem": "100M"}}


def test_arrays_are_cut_at_max_array_size_and_split_by_parameters() -> None:
    requests = [request(f"run{i}", at=i) for i in range(7)] + [request(f"gpu{i}", at=10 + i, partition="gpu")
                                                               for i in range(2)]
    arrays = array_submit.plan_arrays(requests, max_size=3)
    assert [[r["tag"] for r in a] for a in arrays] == [["run0", "run1", "run2"], ["run3", "run4", "run5"], ["run6"],
                                                       ["gpu0", "gpu1"]]
    assert all({r["params"]["partition"] for r in a} in ({"debug"}, {"gpu"}) for a in arrays)
    assert len(array_submit.plan_arrays(requests, max_size=1001)) == 2


@pytest.mark.parametrize(("script", "expected", "logged"), [
    ("echo 'MaxArraySize            = 7'", 7, False),
    ("echo 'scontrol: error: no controller' >&2; exit 1", array_submit.DEFAULT_MAX_ARRAY_SIZE, True)])
def test_max_array_size_from_scontrol_or_a_logged_fallback(tmp_path: Path, monkeypatch, script: str, expected: int,
                                                           logged: bool) -> None:
    (tmp_path / "scontrol").write_text(f"#!/bin/sh\n{script}\n")
    (tmp_path / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    messages: list[str] = []
    assert array_submit.max_array_size(messages.append) == expected
    assert bool(messages) == logged
    assert not logged or "no controller" in messages[0] and "1001" in messages[0]


def test_only_requests_of_live_launchers_are_collected(tmp_path: Path) -> None:
    """A request whose launcher died (its run's launch.lock free) is not submitted; a live one is."""
    live, dead = tmp_path / "live.lock", tmp_path / "dead.lock"
    dead.touch()
    with open(live, "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert array_submit.launcher_alive({"lock": str(live)})
        assert not array_submit.launcher_alive({"lock": str(dead)})
    assert not array_submit.launcher_alive({"lock": str(live)})


def slurm_available() -> bool:
    return shutil.which("sbatch") is not None and subprocess.run(["sinfo"], capture_output=True).returncode == 0


@pytest.fixture
def need_slurm() -> None:
    if not slurm_available():
        if os.environ.get("REQUIRE_SLURM"):
            pytest.fail("REQUIRE_SLURM is set but no SLURM cluster answers (run .ci/slurm-up)")
        pytest.skip("no SLURM cluster here (.ci/slurm-up starts one)")


def run_config(run: str, window_s: float, partition: str = "debug") -> dict[str, Any]:
    """A run on the slurm backend with arrays on; tiny resources (the job only sleeps)."""
    rc = resolve_run_config(load_yaml(ROOT / "config.yaml"), parse_run_id(run))
    rc["launcher"].update(backend="slurm", partition=partition, poll_interval_s=1, signal_delay_s=10,
                          array_window_s=window_s)
    rc["resources"].update(cpus=1, mem_gb=0.1, time_min=5)
    return rc


def start_launchers(tmp_path: Path, n: int, window_s: float, partition: str = "debug"):
    """n launcher processes started together, PATH led by an sbatch that logs its calls; (run dir, process)."""
    (tmp_path / "bin").mkdir()
    shim = tmp_path / "bin" / "sbatch"
    shim.write_text(SBATCH_SHIM.format(log=tmp_path / "sbatch.log", real=shutil.which("sbatch")))
    shim.chmod(0o755)
    base = tmp_path / "model.json"
    base.write_text(json.dumps({"name": "tiny", "path": str(tmp_path / "no-model")}))
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    started = []
    for i in range(n):
        run = f"single-math-tiny-shared-s{i}"
        run_dir = tmp_path / "runs" / run
        cmd = [sys.executable, "-c", LAUNCHER, json.dumps(run_config(run, window_s, partition)), str(base),
               str(run_dir)]
        started.append((run_dir, subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                                  stderr=subprocess.PIPE, text=True)))
    return started


def sbatch_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "sbatch.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.slurm
def test_launchers_started_together_submit_one_array(need_slurm: None, tmp_path: Path) -> None:
    n, t0 = 5, time.time()
    started = start_launchers(tmp_path, n, window_s=15)
    try:
        outs = [(run_dir, *proc.communicate(timeout=240), proc.returncode) for run_dir, proc in started]
    finally:
        records = [json.loads(p.read_text()) for p in (tmp_path / "runs").glob("*/work/job.json")]
        subprocess.run(["scancel", *{r["job_id"].split("_")[0] for r in records}], capture_output=True)
    took = time.time() - t0
    for run_dir, out, err, rc in outs:
        assert rc == 0, f"{run_dir.name}: launcher exited {rc}\n{err[-3000:]}"
    calls = sbatch_calls(tmp_path)
    assert len(calls) == 1, calls
    ids = {run_dir.name: json.loads((run_dir / "work" / "job.json").read_text())["job_id"] for run_dir, *_ in outs}
    arrays = {job_id.split("_")[0] for job_id in ids.values()}
    assert len(arrays) == 1 and sorted(int(j.split("_")[1]) for j in ids.values()) == list(range(n)), ids
    for run_dir, out, err, _ in outs:  # each launcher got its own task's result
        result = json.loads(out.strip().splitlines()[-1])
        assert result == {"run_dir": str(run_dir), "task": ids[run_dir.name]}, (result, err[-2000:])
        assert f"submitted slurm job {ids[run_dir.name]}" in err
    assert not list((tmp_path / "runs" / array_submit.SPOOL_DIR).glob("*.json")), "a request was left behind"
    print(f"{n} launchers: {len(calls)} sbatch call (array {arrays.pop()}), all results in {took:.0f}s")


@pytest.mark.slurm
def test_a_rejected_array_fails_each_launcher_naming_runs_and_error(need_slurm: None, tmp_path: Path) -> None:
    started = start_launchers(tmp_path, 3, window_s=5, partition="no-such-partition")
    outs = [(run_dir, *proc.communicate(timeout=120), proc.returncode) for run_dir, proc in started]
    assert len(sbatch_calls(tmp_path)) == 1
    runs = [run_dir.name for run_dir, *_ in outs]
    for run_dir, out, err, rc in outs:
        assert rc != 0 and not (run_dir / "work" / "job.json").exists()
        message = next(line for line in err.splitlines() if "submitting the array of runs" in line)
        assert all(run in message for run in runs), message
        assert "invalid partition" in err.lower(), err[-2000:]
