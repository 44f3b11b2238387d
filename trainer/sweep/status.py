"""Where every run of a matrix stands, from its run directory and the scheduler.

    python -m trainer status [--config-file config.yaml ...] [--config matrix=paper ...] [--matrix NAME]
                             [--results results] [--json]

States: `not started` (nothing submitted or run), `queued` (a live SLURM job that is not running yet),
`running` (step / total from work/progress.json, which the trainer writes atomically after every
step), `failed` (work/failure.json's error line, or a job that ended without a result: the last
error line of its log), `interrupted` (started, no live job, no error: a rerun resumes it), `outdated`
(done.json of another config) and `done` (done.json with all steps under the config.json's hash).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trainer.contract import rundir
from trainer.sweep.config import expand_matrix
from trainer.sweep.job_watch import grace_warning
from trainer.sweep.launch import JOB_JSON
from trainer.sweep.slurm_poll import LIVE_SLURM_STATES

ERROR_LINE = re.compile(r"(Error|Exception|error:|Traceback|CANCELLED|DUE TO TIME LIMIT|Killed)")


@dataclass
class RunStatus:
    """One run's state and the detail that goes with it (job id, step / total, error line)."""

    run: str
    state: str
    detail: str = ""
    job_id: str | None = None
    step: int | None = None
    max_steps: int | None = None


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON file's content, or None if it does not exist (files are written atomically)."""
    return json.loads(path.read_text()) if path.exists() else None


def slurm_states() -> dict[str, str] | None:
    """Every job squeue lists (ended ones too, while SLURM keeps them): id -> state; None without SLURM."""
    try:
        proc = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i|%T"], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return None
    if proc.returncode != 0:
        return None
    return dict(line.split("|", 1) for line in proc.stdout.splitlines() if "|" in line)


def last_error_line(log: Path) -> str:
    """The last line of a job log that looks like an error, else its last line."""
    if not log.exists():
        return f"(no log at {log})"
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if ERROR_LINE.search(line)]
    return (errors or lines or ["(empty log)"])[-1][:300]


def job_log(job: dict[str, Any]) -> Path:
    """The stderr log of a submitit job (submitit's naming: JOBID_0_log.err)."""
    return Path(job["folder"]) / f"{job['job_id']}_0_log.err"


def progress_text(progress: dict[str, Any] | None, max_steps: int | None) -> tuple[int | None, str]:
    """The step reached and `step k/N`, from work/progress.json."""
    if not progress:
        return None, "starting"
    return progress["step"], f"step {progress['step']}/{progress.get('max_steps', max_steps)}"


def evals_so_far(work: Path) -> str:
    """`eval 0.41@20, peak 0.47@10` on the first eval split, from the partial work/eval.parquet the trainer
    refreshes at each eval; empty before the first eval."""
    path = work / rundir.EVAL_PARQUET
    if not path.exists():
        return ""
    import pyarrow.parquet as pq

    evals = pq.read_table(path, columns=["step", "split", "accuracy"]).to_pandas()
    if not len(evals):
        return ""
    first = evals[evals["split"] == evals["split"].iloc[0]].sort_values("step", kind="stable")
    last, peak = first.iloc[-1], first.loc[first["accuracy"].idxmax()]
    return f", eval {last['accuracy']:.3f}@{int(last['step'])}, peak {peak['accuracy']:.3f}@{int(peak['step'])}"


def job_liveness(job: dict[str, Any] | None, squeue: dict[str, str] | None) -> str | None:
    """The state of the run's recorded job if it is live (SLURM state, or RUNNING for a live local pid)."""
    if not job:
        return None
    if job.get("backend") == "slurm":
        state = (squeue or {}).get(str(job["job_id"]), "").upper()
        return state if state in LIVE_SLURM_STATES else None
    if job.get("backend") == "local" and str(job.get("job_id", "")).isdigit():
        return "RUNNING" if rundir.pid_alive(int(job["job_id"])) else None
    return None


def run_status(run: str, run_dir: Path, squeue: dict[str, str] | None) -> RunStatus:
    """The state of one run, with grace_warning's message after its detail where it applies."""
    row = run_state(run, run_dir, squeue)
    config = read_json(run_dir / rundir.CONFIG_JSON)
    if row.state in ("queued", "running", "interrupted") and config and "launcher" in config:
        warning = grace_warning(config, read_json(run_dir / rundir.WORK_DIR / rundir.PROGRESS_JSON))
        row.detail += f" ({warning})" if warning else ""
    return row


def run_state(run: str, run_dir: Path, squeue: dict[str, str] | None) -> RunStatus:
    """The state of one run from its directory and the scheduler's job states."""
    work = run_dir / rundir.WORK_DIR
    config = read_json(run_dir / rundir.CONFIG_JSON)
    if config is None and not work.exists():
        return RunStatus(run, "not started")
    max_steps = config["training"]["max_steps"] if config else None
    done = read_json(run_dir / rundir.DONE_JSON)
    # before run_is_done, which counts a done-early run as done
    if done and config and done.get("config_hash") == config["config_hash"] and done.get("stopped_early"):
        w = done["stopped_early"]  # training.on_warning: stop (trainer/early_warning.py)
        return RunStatus(
            run,
            "done-early",
            f"stopped at step {done['steps_done']}/{max_steps}: {w['detector']} on {w['role']}",
            step=done["steps_done"],
            max_steps=max_steps,
        )
    if rundir.run_is_done(done, config):
        return RunStatus(
            run, "done", f"{max_steps} steps, {done.get('wall_time_s', 0):.0f}s", step=max_steps, max_steps=max_steps
        )
    job = read_json(work / JOB_JSON)
    progress = read_json(work / rundir.PROGRESS_JSON)
    failure = read_json(work / rundir.FAILURE_JSON)
    if done and config and job is None and progress is None and failure is None:
        return RunStatus(
            run,
            "outdated",
            f"done.json is of config {done.get('config_hash')}, config.json of "
            f"{config['config_hash']}: rerun it (restart)",
            max_steps=max_steps,
        )
    if job is None and progress is None and failure is None:
        return RunStatus(run, "not started", "config.json written, nothing submitted", max_steps=max_steps)
    step, where = progress_text(progress, max_steps)
    live = job_liveness(job, squeue)
    job_id = str(job["job_id"]) if job else None
    if live in ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING"):
        saved = f", resumes at {where}" if progress else ""
        return RunStatus(run, "queued", f"job {job_id} {live.lower()}{saved}", job_id, step, max_steps)
    if live:
        return RunStatus(run, "running", f"{where}{evals_so_far(work)} (job {job_id})", job_id, step, max_steps)
    if failure:
        return RunStatus(run, "failed", failure["error"][:300], job_id, step, max_steps)
    if job and job.get("backend") == "slurm" and squeue is not None and not (progress and progress["phase"] == "done"):
        ended = squeue.get(job_id, "no longer listed").lower()
        return RunStatus(
            run, "failed", f"job {job_id} {ended} at {where}: {last_error_line(job_log(job))}", job_id, step, max_steps
        )
    return RunStatus(
        run, "interrupted", f"{where}{evals_so_far(work)}, no live job; a rerun resumes it", job_id, step, max_steps
    )


def matrix_status(config: dict[str, Any], results: str | Path, matrix: str | None = None) -> list[RunStatus]:
    """The status of every run of the matrix (default: the config's), in the matrix's order."""
    squeue = slurm_states()
    return [run_status(str(r), Path(results) / "runs" / str(r), squeue) for r in expand_matrix(config, matrix)]


def format_table(rows: list[RunStatus]) -> str:
    """A fixed-width table of the runs and a count per state."""
    width = max([len(r.run) for r in rows] + [3])
    lines = [f"{'run':<{width}}  {'state':<11}  detail"]
    lines += [f"{r.run:<{width}}  {r.state:<11}  {r.detail}" for r in rows]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.state] = counts.get(r.state, 0) + 1
    lines.append(f"{len(rows)} runs: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return "\n".join(lines)


def as_json(rows: list[RunStatus]) -> str:
    """The rows as a JSON list (for scripts and tests)."""
    return json.dumps([asdict(r) for r in rows], indent=1)


def snakemake_processes(workdir: Path) -> list[tuple[int, list[str]]]:
    """(pid, argv) of the Snakemake processes on this host whose working directory is `workdir`."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
            if os.path.realpath(proc / "cwd") != os.path.realpath(workdir):
                continue
        except OSError:  # gone meanwhile, or another user's
            continue
        if any(Path(a).name == "snakemake" for a in argv[:2]) or argv[1:3] == ["-m", "snakemake"]:
            found.append((int(proc.name), argv))
    return found


def ancestors() -> set[int]:
    """This process and its parents (a `snakemake status` that runs this command is one of them)."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return pids


def stale_lock_message(workdir: Path) -> str | None:
    """What to do about a Snakemake lock in `workdir` that no live Snakemake process holds, else None.

    A Snakemake that was killed (login node lost, SIGKILL) leaves .snakemake/locks/ behind and the next
    run refuses with `LockException`. A Snakemake of this directory that runs here and is not
    `--nolock` (nor one of this command's parents running with --nolock) holds the lock: then it is
    not stale. A Snakemake on another host sharing the directory cannot be seen from here; the message
    says so.
    """
    locks = sorted((workdir / ".snakemake" / "locks").glob("*.lock"))
    if not locks:
        return None
    mine = ancestors()
    holders = [pid for pid, argv in snakemake_processes(workdir) if not (pid in mine and "--nolock" in argv)]
    if holders:
        return None
    return (
        f"STALE LOCK: {workdir / '.snakemake' / 'locks'} holds {len(locks)} lock files and no Snakemake process "
        f"runs in {workdir} on this host: the Snakemake that took them was killed. If no Snakemake of this "
        f"directory runs on another host, clear them with `snakemake --unlock` (add the same --profile and "
        f"--config options), then run the same command again: finished runs are kept, runs whose SLURM job is "
        f"still alive are re-attached (not resubmitted), interrupted runs resume from their last checkpoint."
    )
