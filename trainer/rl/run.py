"""Training one run directory: what a job calls (`run_training`), with the run's lock, the record
of a failed attempt and the clean-up of temporaries that a killed process left.

The loop itself is trainer/rl/train.py's Trainer.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainer.contract import rundir
from trainer.rl.checkpoint_files import check_room
from trainer.rl.distributed import process_group
from trainer.rl.tracking import reset_state
from trainer.rl.train import Trainer
from trainer.settings import ResourceSettings, default_of


def run_training(
    run_dir: str | Path, restart: bool = False, stop: threading.Event | None = None
) -> dict[str, Any] | None:
    """Train the run whose config.json is in `run_dir` (what a submitit job calls).

    Resumes from the newest checkpoint under work/; `restart` discards the checkpoints first.
    Holds work/train.lock while training, so a second process on the same run fails at once
    instead of writing the same checkpoints. An error is also written to work/failure.json (for
    `status`). Returns done.json's content, or None when `stop` ended the run early.
    In a job of several tasks (resources.gpus / resources.processes), every task calls this: they
    form the run's process group (trainer/rl/distributed.py) and rank 0 alone locks and writes.
    """
    run_dir = Path(run_dir)
    work = run_dir / rundir.WORK_DIR
    work.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((run_dir / rundir.CONFIG_JSON).read_text())
    timeout = cfg["resources"].get("collective_timeout_min", default_of(ResourceSettings, "collective_timeout_min"))
    with process_group(cfg["resources"], cfg["run"], timeout_min=timeout) as ranks:
        with hold_run_lock(work) if ranks.is_main else contextlib.nullcontext():
            if ranks.is_main:
                remove_stale_temporaries(run_dir)
                if restart:
                    shutil.rmtree(work / rundir.CHECKPOINTS_DIR, ignore_errors=True)
                    reset_state(work)  # a fresh tracker run
                (work / rundir.FAILURE_JSON).unlink(missing_ok=True)
            ranks.barrier()  # DDP: the others read the checkpoints once rank 0 has cleaned up
            done_path = run_dir / rundir.DONE_JSON
            if done_path.exists() and rundir.run_is_done(json.loads(done_path.read_text()), cfg):
                return json.loads(done_path.read_text())
            try:
                trainer = Trainer(cfg, run_dir, ranks=ranks)
                if ranks.is_main:  # rank 0 writes the checkpoints: room for the next one, or fail now
                    check_room(work, cfg, trainer.policies.modules()[0].config.to_dict())
                return trainer.fit(stop)
            except Exception as e:
                write_failure(work, cfg["run"], e)
                raise


class RunBusyError(RuntimeError):
    """Another process is training this run right now."""


@contextlib.contextmanager
def hold_run_lock(work: Path) -> Iterator[None]:
    """An exclusive flock on work/train.lock for the duration of a `with` block.

    The kernel drops it when the holder dies (SIGKILL included), so it never goes stale.
    """
    with open(work / rundir.TRAIN_LOCK, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            raise RunBusyError(
                f"{work / rundir.TRAIN_LOCK}: another process trains this run ({f.read().strip()}); "
                f"wait for it or stop it"
            ) from None
        f.truncate(0)
        f.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        f.flush()
        yield


def remove_stale_temporaries(run_dir: Path) -> None:
    """Delete the temporary files of atomic writes (`.NAME.tmp-PID`) that a killed process left in
    the run directory; a live process's (e.g. the launcher's, on this host) is left alone."""
    for stale in [*run_dir.glob(".*.tmp-*"), *(run_dir / rundir.WORK_DIR).glob(".*.tmp-*")]:
        pid = stale.name.rsplit("-", 1)[-1]
        if not (pid.isdigit() and int(pid) != os.getpid() and rundir.pid_alive(int(pid))):
            stale.unlink(missing_ok=True)


def write_failure(work: Path, run: str, error: BaseException) -> None:
    """work/failure.json: the error that ended this attempt, one line first (read by `status`)."""
    line = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    rundir.write_json_atomic(
        {
            "run": run,
            "error": line,
            "message": str(error)[-4000:],
            "host": socket.gethostname(),
            "failed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
        work / rundir.FAILURE_JSON,
    )
