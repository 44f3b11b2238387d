"""Submit one run with submitit and wait for it: `slurm` on a cluster, `local` or `debug` elsewhere.

    python -m trainer launch --run-config JSON --base-model results/models/tiny/model.json \
        --run-dir results/runs/voting-math-tiny-shared-s0

writes the run's config.json (with its hash), submits the training job (its folder under the
run's work/), records the job in work/job.json, streams the job's log, and exits non-zero with
the job's error and the tail of its log if it fails. A rerun re-attaches to a SLURM job of the
same run that is still queued or running instead of submitting a second one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import submitit
from submitit.helpers import Checkpointable, DelayedSubmission

from trainer import schema
from trainer.config import config_hash

LIVE_SLURM_STATES = {"PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "RESIZING", "SUSPENDED",
                     "REQUEUE_HOLD", "REQUEUE_FED", "STOPPED", "SIGNALING", "STAGE_OUT"}
VANISHED_GRACE_S = 60  # a job gone from squeue without a result file is failed after this long


class TrainJob(Checkpointable):
    """The training job; on SLURM timeout or preemption submitit calls checkpoint() and requeues it.

    The trainer checkpoints under work/ as it goes, so the requeued job resumes from there.
    """

    def __call__(self, run_dir: str, restart: bool = False) -> dict[str, Any]:
        from trainer.train import run_training

        return run_training(run_dir, restart=restart)

    def checkpoint(self, run_dir: str, restart: bool = False) -> DelayedSubmission:
        return DelayedSubmission(TrainJob(), run_dir)  # the requeued job resumes; it never restarts


class LaunchError(RuntimeError):
    """A run's job failed or could not be submitted; the message says which and why."""


def write_run_config(run_config: dict[str, Any], base_model: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """config.json: the resolved run config, the base model it starts from, and the content hash."""
    cfg = {**run_config, "base_model": base_model}
    cfg["config_hash"] = config_hash(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    schema.write_json_atomic(cfg, run_dir / schema.CONFIG_JSON)
    return cfg


def make_executor(cfg: dict[str, Any], folder: Path) -> submitit.Executor:
    """The submitit executor of the run's backend, with the run's resources."""
    launcher, res = cfg["launcher"], cfg["resources"]
    backend = launcher["backend"]
    if backend == "debug":
        return submitit.DebugExecutor(folder=str(folder))
    if backend == "local":
        ex = submitit.LocalExecutor(folder=str(folder))
        ex.update_parameters(timeout_min=res["time_min"])
        return ex
    if backend == "slurm":
        ex = submitit.SlurmExecutor(folder=str(folder), max_num_timeout=launcher.get("max_num_timeout", 3))
        params: dict[str, Any] = {"job_name": cfg["run"], "time": res["time_min"], "cpus_per_task": res["cpus"],
                                  "mem": f"{int(res['mem_gb'] * 1024)}M", "ntasks_per_node": 1, "nodes": 1}
        if res.get("gpus"):
            params["gpus_per_node"] = res["gpus"]
        for key in ("partition", "account", "qos"):
            if launcher.get(key):
                params[key] = launcher[key]
        if launcher.get("sbatch_extra"):
            params["additional_parameters"] = dict(launcher["sbatch_extra"])
        ex.update_parameters(**params)
        return ex
    raise LaunchError(f"launcher.backend: unknown backend {backend!r} (local, debug or slurm)")


def slurm_state(job_id: str) -> str | None:
    """The job's state from squeue, or None once SLURM no longer lists it as active.

    squeue rather than submitit's watcher: that one asks sacct, which clusters without
    accounting storage do not have.
    """
    proc = subprocess.run(["squeue", "-h", "-j", str(job_id), "-o", "%T"], capture_output=True, text=True)
    states = proc.stdout.split()
    return states[0].upper() if proc.returncode == 0 and states else None


def live_slurm_job(work: Path) -> submitit.Job | None:
    """The SLURM job recorded in work/job.json if it is still queued or running."""
    path = work / "job.json"
    if not path.exists():
        return None
    rec = json.loads(path.read_text())
    if rec.get("backend") != "slurm":
        return None
    job = submitit.SlurmJob(folder=rec["folder"], job_id=rec["job_id"])
    return job if slurm_state(job.job_id) in LIVE_SLURM_STATES else None


def log_tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log file, or a note that it does not exist."""
    if not path.exists():
        return f"(no log at {path})"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def wait_and_stream(job: submitit.Job, poll_s: float, out=sys.stderr) -> None:
    """Block until the job ends, copying new lines of its stderr log (the trainer's progress) to `out`.

    Raises LaunchError if a SLURM job leaves the queue without writing a result (killed, node lost).
    """
    pos, gone_since = 0, None
    while True:
        finished = job.done()
        if not finished and isinstance(job, submitit.SlurmJob):
            if slurm_state(job.job_id) is None:
                gone_since = gone_since or time.time()
                if time.time() - gone_since > VANISHED_GRACE_S:
                    raise LaunchError(f"SLURM job {job.job_id} left the queue without a result\n"
                                      f"--- tail of {job.paths.stderr} ---\n{log_tail(Path(job.paths.stderr))}")
            else:
                gone_since = None
        path = Path(job.paths.stderr)
        if path.exists():
            with open(path, errors="replace") as f:
                f.seek(pos)
                chunk = f.read()
                pos = f.tell()
            if chunk:
                out.write(chunk)
                out.flush()
        if finished:
            return
        time.sleep(poll_s)


def launch(run_config: dict[str, Any], base_model_json: str | Path, run_dir: str | Path,
           restart: bool = False) -> dict[str, Any]:
    """Submit (or re-attach to) the run's job and wait for it; return done.json's content."""
    run_dir = Path(run_dir)
    base_model = json.loads(Path(base_model_json).read_text())
    cfg = write_run_config(run_config, base_model, run_dir)
    work = run_dir / schema.WORK_DIR
    folder = work / "submitit"
    folder.mkdir(parents=True, exist_ok=True)
    backend = cfg["launcher"]["backend"]
    job = live_slurm_job(work) if backend == "slurm" else None
    if job is not None:
        print(f"[{cfg['run']}] re-attaching to SLURM job {job.job_id}", file=sys.stderr, flush=True)
    else:
        executor = make_executor(cfg, folder)
        job = executor.submit(TrainJob(), str(run_dir), restart)
        schema.write_json_atomic({"backend": backend, "job_id": str(job.job_id), "folder": str(folder),
                                  "run": cfg["run"], "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
                                 work / "job.json")
        print(f"[{cfg['run']}] submitted {backend} job {job.job_id}", file=sys.stderr, flush=True)
    try:
        if backend != "debug":
            wait_and_stream(job, float(cfg["launcher"].get("poll_interval_s", 5)))
        return job.result()
    except LaunchError:
        raise
    except Exception as e:  # the job's own error: re-raise with where to look
        raise LaunchError(
            f"run {cfg['run']}: {backend} job {job.job_id} failed: {type(e).__name__}: {str(e)[-2000:]}\n"
            f"--- tail of {job.paths.stderr} ---\n{log_tail(Path(job.paths.stderr))}") from e
