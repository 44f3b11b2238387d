"""launcher.array_window_s (trainer/sweep/array_submit.py): the sweep's submissions go as SLURM job arrays.

Without a cluster: arrays are cut at MaxArraySize and split by executor parameters, MaxArraySize is read
from `scontrol show config` (or falls back, saying so), and only live launchers' requests are collected.
On the real single-node cluster (.ci/slurm-up; skipped without it unless REQUIRE_SLURM is set): five
launchers started together submit one array (one sbatch call) and each gets its own task's result; a
rejected sbatch fails every launcher of the array, naming its runs and sbatch's error; the launcher
that collects, killed in its window, leaves no request submitted twice or never; a launcher killed
while its task runs re-attaches to it on rerun (work/job.json); an array task
signalled at its time limit is requeued by submitit under its own id while its launcher waits. The
jobs sleep (Sleeper, Requeued), never train: each launcher is the real `trainer.sweep.launch.launch`
with array_submit.TRAIN_JOB pointed at the sleeper.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from submitit.helpers import Checkpointable

from tests.workflow import ROOT
from trainer.contract.runid import parse_run_id
from trainer.sweep import array_submit
from trainer.sweep.config import load_yaml, resolve_run_config
from trainer.sweep.launch import job_tag

SBATCH_SHIM = """#!/bin/sh
echo "$(date +%s.%N) sbatch $*" >> {log}
exec {real} "$@"
"""
LAUNCHER = """import json, sys
import trainer.sweep.array_submit as array_submit
array_submit.TRAIN_JOB = sys.argv[4]
from trainer.sweep.launch import launch
print(json.dumps(launch(json.loads(sys.argv[1]), sys.argv[2], sys.argv[3])))
"""


class Requeued(Checkpointable):
    """A task that sleeps past its time limit on its first run, so that submitit's signal handler
    requeues it (checkpoint: Checkpointable's, the same call again); the next run returns at once."""

    def __call__(self, run_dir: str) -> dict[str, Any]:
        import submitit

        marker = Path(run_dir) / "first-run"
        if not marker.exists():
            marker.write_text(submitit.JobEnvironment().job_id)
            time.sleep(300)
        return {"run_dir": run_dir, "task": submitit.JobEnvironment().job_id, "first": marker.read_text()}


class Sleeper:
    """What each array task runs instead of training: a short sleep, then which run and task it was."""

    def __call__(self, run_dir: str) -> dict[str, Any]:
        import submitit

        time.sleep(float(os.environ.get("SLEEPER_S", "1")))  # sbatch hands the launcher's environment on
        return {"run_dir": run_dir, "task": submitit.JobEnvironment().job_id}  # ARRAYID_INDEX in an array


def request(tag: str, at: float, partition: str = "debug") -> dict[str, Any]:
    return {
        "tag": tag,
        "requested_at": at,
        "max_num_timeout": 3,
        "job": array_submit.TRAIN_JOB,
        "params": {"partition": partition, "time": 5, "mem": "100M"},
    }


def test_arrays_are_cut_at_max_array_size_and_split_by_parameters() -> None:
    requests = [request(f"run{i}", at=i) for i in range(7)] + [
        request(f"gpu{i}", at=10 + i, partition="gpu") for i in range(2)
    ]
    arrays = array_submit.plan_arrays(requests, max_size=3)
    assert [[r["tag"] for r in a] for a in arrays] == [
        ["run0", "run1", "run2"],
        ["run3", "run4", "run5"],
        ["run6"],
        ["gpu0", "gpu1"],
    ]
    assert all({r["params"]["partition"] for r in a} in ({"debug"}, {"gpu"}) for a in arrays)
    assert len(array_submit.plan_arrays(requests, max_size=1001)) == 2


@pytest.mark.parametrize(
    ("script", "expected", "logged"),
    [
        ("echo 'MaxArraySize            = 7'", 7, False),
        ("echo 'scontrol: error: no controller' >&2; exit 1", array_submit.DEFAULT_MAX_ARRAY_SIZE, True),
    ],
)
def test_max_array_size_from_scontrol_or_a_logged_fallback(
    tmp_path: Path, monkeypatch, script: str, expected: int, logged: bool
) -> None:
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


def test_a_dead_holders_claims_are_recorded_or_asked_again(tmp_path: Path, monkeypatch) -> None:
    """A holder killed between claiming and answering: an array squeue lists (by its comment) is recorded
    in each run's job.json; a claimed chunk squeue does not list (never submitted) goes back to pending."""
    runs, spool = tmp_path / "runs", tmp_path / "runs" / array_submit.SPOOL_DIR
    spool.mkdir(parents=True)
    for run, chunk, index, size in (("a", "x", 0, 2), ("b", "x", 1, 2), ("c", "y", 0, 1)):
        (runs / run / "work").mkdir(parents=True)
        (spool / f"{run}.json").write_text(
            json.dumps(
                {
                    "state": array_submit.CLAIMED,
                    "path": str(spool / f"{run}.json"),
                    "run": run,
                    "tag": run,
                    "record": {"run": run, "tag": run},
                    "job_json": str(runs / run / "work" / "job.json"),
                    "comment": f"{array_submit.ARRAY_COMMENT}{chunk}",
                    "index": index,
                    "size": size,
                }
            )
        )
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "squeue").write_text(
        "#!/bin/sh\nprintf '170_0|RUNNING|trainer-array:x\\n170_1|PENDING|trainer-array:x\\n9|RUNNING|other\\n'\n"
    )
    (tmp_path / "bin" / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    array_submit.recover_claimed(spool, lambda message: None)
    for run, job_id in (("a", "170_0"), ("b", "170_1")):
        record = json.loads((runs / run / "work" / "job.json").read_text())
        assert (record["job_id"], record["folder"]) == (job_id, str(runs / array_submit.JOBS_DIR / "x"))
        assert json.loads((spool / f"{run}.json").read_text())["state"] == array_submit.SUBMITTED
    assert not (runs / "c" / "work" / "job.json").exists()
    assert json.loads((spool / "c.json").read_text())["state"] == array_submit.PENDING


def run_config(run: str, window_s: float, partition: str = "debug") -> dict[str, Any]:
    """A run on the slurm backend with arrays on; tiny resources (the job only sleeps)."""
    rc = resolve_run_config(load_yaml(ROOT / "config.yaml"), parse_run_id(run))
    rc["launcher"].update(
        backend="slurm", partition=partition, poll_interval_s=1, signal_delay_s=10, array_window_s=window_s
    )
    rc["resources"].update(cpus=1, mem_gb=0.5, time_min=5)
    return rc


def start_launchers(
    tmp_path: Path,
    seeds: Iterable[int],
    window_s: float,
    partition: str = "debug",
    job: str = "tests.test_slurm_arrays:Sleeper",
    time_min: int = 5,
    sleep_s: float = 1,
    **launcher: Any,
):
    """A launcher per seed, started together, PATH led by an sbatch that logs its calls; (run dir, process)."""
    shim = tmp_path / "bin" / "sbatch"
    if not shim.exists():
        shim.parent.mkdir()
        shim.write_text(SBATCH_SHIM.format(log=tmp_path / "sbatch.log", real=shutil.which("sbatch")))
        shim.chmod(0o755)
    base = tmp_path / "model.json"
    base.write_text(json.dumps({"name": "tiny", "path": str(tmp_path / "no-model")}))
    env = {
        **os.environ,
        "PATH": f"{shim.parent}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "SLEEPER_S": str(sleep_s),
    }
    started = []
    for seed in seeds:
        run = f"single-math-tiny-shared-s{seed}"
        run_dir = tmp_path / "runs" / run
        rc = run_config(run, window_s, partition)
        rc["launcher"].update(launcher)
        rc["resources"]["time_min"] = time_min
        cmd = [sys.executable, "-c", LAUNCHER, json.dumps(rc), str(base), str(run_dir), job]
        started.append(
            (
                run_dir,
                subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
            )
        )
    return started


def job_ids(tmp_path: Path) -> dict[str, str]:
    """Run name -> the job id its work/job.json records."""
    return {p.parents[1].name: json.loads(p.read_text())["job_id"] for p in (tmp_path / "runs").glob("*/work/job.json")}


def assert_own_results(outs: list[tuple[Path, str, str, int]], ids: dict[str, str]) -> None:
    """Every launcher exited 0 with its own run's result, from the task its job.json records."""
    for run_dir, out, err, rc in outs:
        assert rc == 0, f"{run_dir.name}: launcher exited {rc}\n{err[-3000:]}"
        result = json.loads(out.strip().splitlines()[-1])
        assert result == {"run_dir": str(run_dir), "task": ids[run_dir.name]}, (result, err[-2000:])


def lock_holder(lock: Path) -> int | None:
    """The pid holding an flock on `lock` (/proc/locks), or None."""
    if not lock.exists():
        return None
    inode = os.stat(lock).st_ino
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" not in fields and fields[1] == "FLOCK" and int(fields[5].split(":")[-1]) == inode:
            return int(fields[4])
    return None


def sbatch_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "sbatch.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.slurm
def test_launchers_started_together_submit_one_array(need_slurm: None, tmp_path: Path) -> None:
    n, t0 = 5, time.time()
    started = start_launchers(tmp_path, range(n), window_s=15)
    try:
        outs = [(run_dir, *proc.communicate(timeout=240), proc.returncode) for run_dir, proc in started]
    finally:
        records = [json.loads(p.read_text()) for p in (tmp_path / "runs").glob("*/work/job.json")]
        subprocess.run(["scancel", *{r["job_id"].split("_")[0] for r in records}], capture_output=True)
    took = time.time() - t0
    calls = sbatch_calls(tmp_path)
    assert len(calls) == 1, calls
    ids = {run_dir.name: json.loads((run_dir / "work" / "job.json").read_text())["job_id"] for run_dir, *_ in outs}
    arrays = {job_id.split("_")[0] for job_id in ids.values()}
    assert len(arrays) == 1 and sorted(int(j.split("_")[1]) for j in ids.values()) == list(range(n)), ids
    assert_own_results(outs, ids)
    assert all(f"submitted slurm job {ids[run_dir.name]}" in err for run_dir, _, err, _ in outs)
    assert not list((tmp_path / "runs" / array_submit.SPOOL_DIR).glob("*.json")), "a request was left behind"
    print(f"{n} launchers: {len(calls)} sbatch call (array {arrays.pop()}), all results in {took:.0f}s")


@pytest.mark.slurm
def test_a_rejected_array_fails_each_launcher_naming_runs_and_error(need_slurm: None, tmp_path: Path) -> None:
    started = start_launchers(tmp_path, range(3), window_s=5, partition="no-such-partition")
    outs = [(run_dir, *proc.communicate(timeout=120), proc.returncode) for run_dir, proc in started]
    assert len(sbatch_calls(tmp_path)) == 1
    runs = [run_dir.name for run_dir, *_ in outs]
    for run_dir, _out, err, rc in outs:
        assert rc != 0 and not (run_dir / "work" / "job.json").exists()
        message = next(line for line in err.splitlines() if "submitting the array of runs" in line)
        assert all(run in message for run in runs), message
        assert "invalid partition" in err.lower(), err[-2000:]


@pytest.mark.slurm
def test_a_holder_killed_in_its_window_leaves_no_request_submitted_twice_or_never(
    need_slurm: None, tmp_path: Path
) -> None:
    """SIGKILL the launcher that collects (holds the spool lock) while it waits its window: another takes
    over and submits the three live runs as one array; the dead launcher's request is not submitted, and
    its rerun takes it over and submits it once (a second sbatch call)."""
    started = start_launchers(tmp_path, range(4), window_s=20)
    spool = tmp_path / "runs" / array_submit.SPOOL_DIR
    pids = {proc.pid: (run_dir, proc) for run_dir, proc in started}
    deadline = time.time() + 90
    while not (len(list(spool.glob("*.json"))) == 4 and lock_holder(spool / array_submit.SUBMIT_LOCK) in pids):
        assert time.time() < deadline, "the four requests and a holder never appeared"
        time.sleep(0.2)
    killed_dir, killed = pids[lock_holder(spool / array_submit.SUBMIT_LOCK)]
    killed.kill()
    killed.communicate()
    try:
        outs = [
            (run_dir, *proc.communicate(timeout=240), proc.returncode)
            for run_dir, proc in started
            if proc is not killed
        ]
        assert len(sbatch_calls(tmp_path)) == 1 and not (killed_dir / "work" / "job.json").exists()
        left = json.loads((spool / f"{job_tag(killed_dir.name, killed_dir)}.json").read_text())
        assert left["state"] == array_submit.PENDING, left  # neither submitted with the others nor dropped
        [(_, rerun)] = start_launchers(tmp_path, [int(killed_dir.name[-1])], window_s=1)
        outs.append((killed_dir, *rerun.communicate(timeout=240), rerun.returncode))
    finally:
        subprocess.run(["scancel", *{j.split("_")[0] for j in job_ids(tmp_path).values()}], capture_output=True)
    ids = job_ids(tmp_path)
    assert_own_results(outs, ids)
    assert len(sbatch_calls(tmp_path)) == 2 and len({ids[d.name].split("_")[0] for d, *_ in outs}) == 2
    assert not list(spool.glob("*.json")), "a request was left behind"


@pytest.mark.slurm
def test_a_killed_launcher_reattaches_to_its_array_task(need_slurm: None, tmp_path: Path) -> None:
    """SIGKILL a launcher while its array task runs: the rerun re-attaches to ARRAYID_INDEX (work/job.json)
    instead of submitting again, and gets its own task's result."""
    started = start_launchers(tmp_path, range(2), window_s=3, sleep_s=20)
    (killed_dir, killed), (other_dir, other) = started
    deadline = time.time() + 90
    while len(job_ids(tmp_path)) < 2:
        assert time.time() < deadline and killed.poll() is None, "the array was never recorded"
        time.sleep(0.2)
    killed.kill()
    killed.communicate()
    try:
        [(_, rerun)] = start_launchers(tmp_path, [0], window_s=3, sleep_s=20)
        outs = [
            (run_dir, *proc.communicate(timeout=240), proc.returncode)
            for run_dir, proc in ((other_dir, other), (killed_dir, rerun))
        ]
    finally:
        subprocess.run(["scancel", *{j.split("_")[0] for j in job_ids(tmp_path).values()}], capture_output=True)
    ids = job_ids(tmp_path)
    assert f"re-attaching to SLURM job {ids[killed_dir.name]}" in outs[1][2], outs[1][2][-2000:]
    assert_own_results(outs, ids)
    assert len(sbatch_calls(tmp_path)) == 1


@pytest.mark.slurm
def test_an_array_task_signalled_at_its_time_limit_is_requeued_and_its_launcher_waits(
    need_slurm: None, tmp_path: Path
) -> None:
    """submitit's time-limit signal requeues the array task itself (scontrol requeue ARRAYID_INDEX): same
    task id, log continued; each launcher keeps waiting and gets its own task's result."""
    started = start_launchers(
        tmp_path,
        range(2),
        window_s=5,
        job="tests.test_slurm_arrays:Requeued",
        time_min=1,
        signal_delay_s=30,
        max_num_timeout=2,
    )
    try:
        outs = [(run_dir, *proc.communicate(timeout=300), proc.returncode) for run_dir, proc in started]
    finally:
        subprocess.run(["scancel", *{j.split("_")[0] for j in job_ids(tmp_path).values()}], capture_output=True)
    ids = job_ids(tmp_path)
    for run_dir, out, err, rc in outs:
        assert rc == 0, f"{run_dir.name}: launcher exited {rc}\n{err[-3000:]}"
        result = json.loads(out.strip().splitlines()[-1])
        assert result == {"run_dir": str(run_dir), "task": ids[run_dir.name], "first": ids[run_dir.name]}, result
        record = json.loads((run_dir / "work" / "job.json").read_text())
        log = (Path(record["folder"]) / f"{record['job_id']}_0_log.out").read_text()
        assert f"Requeued job {record['job_id']}" in log, log[-3000:]
    assert len(sbatch_calls(tmp_path)) == 1
