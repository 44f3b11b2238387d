"""Watching a run's submitted job until it ends: its log streamed to the launcher's, its SLURM state read from
the sweep's shared squeue snapshot, and a warning when the job's signal grace is shorter than a checkpoint takes.

The launcher (trainer.sweep.launch) submits or re-attaches to the job and then waits here; `LaunchError` and
the typed `launcher` section are defined here, below the launcher, for both.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import submitit

from trainer.contract import rundir
from trainer.settings import LauncherSettings, from_dict
from trainer.sweep.slurm_poll import LIVE_SLURM_STATES, SlurmError, slurm_state

VANISHED_GRACE_S = 60  # a job gone from squeue without a result file is failed after this long
ENDED_GRACE_S = 20  # ... and one squeue shows ended (CANCELLED, FAILED, ...) after this long


class LaunchError(RuntimeError):
    """A run's job failed or could not be submitted; the message says which and why."""


def launcher_settings(cfg: dict[str, Any]) -> LauncherSettings:
    """The run config's `launcher` section, typed (its defaults in trainer.settings)."""
    return from_dict(LauncherSettings, cfg["launcher"], "launcher")


def grace_warning(cfg: dict[str, Any], progress: dict[str, Any] | None) -> str | None:
    """A warning when launcher.signal_delay_s is shorter than the measured update + checkpoint time
    (work/progress.json): a signal during an update could then not checkpoint before the kill."""
    launcher = launcher_settings(cfg)
    if not progress or launcher.backend != "slurm":
        return None
    needed = float(progress.get("update_s", 0)) + float(progress.get("checkpoint_s", 0))
    delay = float(launcher.signal_delay_s)
    if delay >= needed:
        return None
    return (
        f"warning: launcher.signal_delay_s = {delay:.0f}s is shorter than the measured update + checkpoint "
        f"time ({progress.get('update_s', 0):.0f}s + {progress.get('checkpoint_s', 0):.0f}s): a signal during an "
        f"update can lose that step; raise launcher.signal_delay_s above {needed:.0f}"
    )


def log_tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log file, or a note that it does not exist."""
    if not path.exists():
        return f"(no log at {path})"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def warn_on_short_grace(cfg: dict[str, Any], run_dir: Path, warned: set[str], out=sys.stderr) -> None:
    """Write grace_warning's message once per run (the launcher's log)."""
    path = run_dir / rundir.WORK_DIR / rundir.PROGRESS_JSON
    try:
        progress = json.loads(path.read_text()) if path.exists() else None
    except json.JSONDecodeError:  # written atomically: only a file of another writer can be broken
        progress = None
    message = grace_warning(cfg, progress)
    if message and message.split(":")[0] not in warned:
        warned.add(message.split(":")[0])
        out.write(f"[launcher] {message}\n")


def wait_and_stream(
    job: submitit.Job, poll_s: float, out=sys.stderr, cfg: dict[str, Any] | None = None, run_dir: Path | None = None
) -> None:
    """Block until the job ends, copying new lines of its stderr log (the trainer's progress) to `out`.

    A SLURM job is watched through the sweep's shared squeue snapshot (slurm_poll: one call per
    poll interval for all launchers; the runs folder beside `run_dir`) and its result file, never
    submitit's watcher (a sacct call per launcher). Keeps waiting while the job is requeued (its
    log continues in the same file). Raises LaunchError if it ends without writing a result.
    """
    pos, ended_since, last_state, warned = 0, None, "?", set()
    shared = run_dir.parent if run_dir is not None else None
    while True:
        if cfg is not None and run_dir is not None:
            warn_on_short_grace(cfg, run_dir, warned, out)
        if isinstance(job, submitit.SlurmJob):
            finished = job.paths.result_pickle.exists()
            if not finished:
                try:
                    state = slurm_state(job.job_id, shared, poll_s)
                except SlurmError as e:  # a passing failure: counted as not listed (failed after a grace)
                    out.write(f"[launcher] {e}\n")
                    state = None
                if state != last_state:
                    out.write(f"[launcher] SLURM job {job.job_id}: {state or 'no longer listed'}\n")
                    last_state = state
                ended_since = None if state in LIVE_SLURM_STATES else ended_since or time.time()
                if ended_since and time.time() - ended_since > (ENDED_GRACE_S if state else VANISHED_GRACE_S):
                    raise LaunchError(
                        f"SLURM job {job.job_id} ended ({state or 'no longer listed'}) without a "
                        f"result; rerun to resubmit (it resumes from the newest checkpoint)\n"
                        f"--- tail of {job.paths.stderr} ---\n{log_tail(Path(job.paths.stderr))}"
                    )
        else:
            finished = job.done()
        pos = copy_new_lines(Path(job.paths.stderr), pos, out)
        if finished:
            return
        time.sleep(poll_s)


def copy_new_lines(path: Path, pos: int, out) -> int:
    """Write what was appended to `path` since offset `pos` to `out`; return the new offset."""
    if path.exists():
        with open(path, errors="replace") as f:
            f.seek(pos)
            chunk = f.read()
            pos = f.tell()
        if chunk:
            out.write(chunk)
    out.flush()
    return pos
