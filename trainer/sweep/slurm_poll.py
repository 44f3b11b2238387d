"""Where SLURM jobs stand, from one `squeue` call per poll interval for every launcher of a sweep.

Each run in flight has a launcher on the login node waiting for its job. Instead of each calling
squeue (200 runs at a 30 s poll are ~7 calls a second, which admins forbid), they share a snapshot
of every job, `.squeue.json` in the sweep's runs folder: a launcher whose snapshot is older than
its poll interval takes `.squeue.lock`, and, unless another launcher refreshed the snapshot while
it waited for the lock, calls squeue once and replaces the file atomically. The others read it.
squeue rather than sacct: clusters without accounting storage have no sacct (nor does submitit's
watcher work there).
"""

from __future__ import annotations

import fcntl
import getpass
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

LIVE_SLURM_STATES = {
    "PENDING",
    "RUNNING",
    "REQUEUED",
    "CONFIGURING",
    "COMPLETING",
    "RESIZING",
    "SUSPENDED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "STOPPED",
    "SIGNALING",
    "STAGE_OUT",
}
SNAPSHOT = ".squeue.json"
SNAPSHOT_LOCK = ".squeue.lock"


class SlurmError(RuntimeError):
    """squeue failed; the message has its exit status and error."""


def squeue_jobs() -> dict[str, tuple[str, str]]:
    """Every job of this user squeue lists (ended ones too, while SLURM keeps them): id -> (state, comment);
    an array's tasks one by one (-r), as ARRAYID_INDEX, pending ones included. `-u`: the sweep's jobs are the
    submitting user's, and listing every user's jobs is the slow part of a poll on a busy cluster."""
    proc = subprocess.run(
        ["squeue", "-h", "-r", "-t", "all", "-u", getpass.getuser(), "-o", "%i|%T|%k"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        raise SlurmError(f"squeue failed ({proc.returncode}): {proc.stderr.strip()}")
    rows = [line.split("|", 2) for line in proc.stdout.splitlines() if line.count("|") >= 2]
    return {job_id: (state.upper(), comment) for job_id, state, comment in rows}


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):  # absent, or of a writer that died: refresh it
        return None


def shared_snapshot(shared_dir: Path, max_age_s: float) -> dict[str, Any]:
    """The sweep's squeue snapshot, refreshed (one squeue call) only when older than `max_age_s`.

    Returns {"taken_at": epoch seconds, "jobs": {id: [state, comment]}}.
    """
    path = shared_dir / SNAPSHOT
    snap = _read(path)
    if snap is not None and time.time() - snap["taken_at"] < max_age_s:
        return snap
    shared_dir.mkdir(parents=True, exist_ok=True)
    with open(shared_dir / SNAPSHOT_LOCK, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the others wait here for the one that refreshes
        snap = _read(path)
        if snap is not None and time.time() - snap["taken_at"] < max_age_s:
            return snap
        snap = {"taken_at": time.time(), "jobs": {k: list(v) for k, v in squeue_jobs().items()}}
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(snap))
        os.replace(tmp, path)
        return snap


def slurm_state(job_id: str, shared_dir: Path | None = None, max_age_s: float = 0.0) -> str | None:
    """The job's state (ended jobs too, while SLURM keeps them), or None once squeue does not list it.

    With `shared_dir`, from the sweep's shared snapshot (at most `max_age_s` old); else one squeue call.
    """
    if shared_dir is not None:
        entry = shared_snapshot(shared_dir, max_age_s)["jobs"].get(str(job_id))
        return entry[0] if entry else None
    proc = subprocess.run(["squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%T"], capture_output=True, text=True)
    states = proc.stdout.split()
    return states[0].upper() if proc.returncode == 0 and states else None


def slurm_jobs_tagged(tag: str) -> list[str]:
    """Ids of live SLURM jobs whose comment is `tag` (a job submitted just before a launcher died,
    before it could record the job in job.json)."""
    return [
        job_id for job_id, (state, comment) in squeue_jobs().items() if comment == tag and state in LIVE_SLURM_STATES
    ]


def cancel_slurm_job(job_id: str, timeout_s: float = 120) -> None:
    """scancel a job and wait until SLURM no longer lists it as live."""
    subprocess.run(["scancel", str(job_id)], check=True, capture_output=True)
    deadline = time.time() + timeout_s
    while slurm_state(job_id) in LIVE_SLURM_STATES:
        if time.time() > deadline:
            raise SlurmError(f"SLURM job {job_id} still live {timeout_s:.0f}s after scancel")
        time.sleep(1)
