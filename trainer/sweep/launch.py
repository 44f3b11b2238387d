"""Submit one run with submitit and wait for it: `slurm` on a cluster, `local` or `debug` elsewhere.

    python -m trainer launch --run-config JSON --base-model results/models/tiny/model.json \
        --run-dir results/runs/voting-math-tiny-shared-s0 [--restart]

writes the run's config.json (with its hash and the revisions that --prefetched JSONs pin), submits the training job (its folder under the
run's work/), records the job in work/job.json, streams the job's log, and exits non-zero with
the job's error and the tail of its log if it fails.

What survives what:
- the launcher killed and rerun while its job lives: the rerun re-attaches (work/job.json, or
  squeue by the job's comment, which names the run directory) instead of submitting a second job;
  work/launch.lock makes find-or-submit one step, so two launchers never both submit;
- the job's SLURM time limit, a preemption or `scontrol requeue`: the job (train_job.TrainJob) stops
  where it is, checkpoints its last completed step and is requeued; the launcher keeps waiting;
- the job dead (scancel, node lost): a rerun submits a new job, which resumes from the newest
  checkpoint;
- a changed config: refused before anything is submitted, naming the changed keys, unless
  --restart, which moves the state written under another config to work/superseded/ (kept).
With launcher.array_window_s the sweep's runs share job arrays (array_submit.py: its guarantees, its limit).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import submitit

from trainer.contract import rundir
from trainer.contract.config import checkpoint_config, config_hash, hashed_view, resume_conflict
from trainer.rl.processes import world_size_of
from trainer.settings import ResourceSettings, from_dict
from trainer.sweep.array_submit import ArraySubmitError, submit_in_array
from trainer.sweep.job_watch import LaunchError, launcher_settings, log_tail, wait_and_stream
from trainer.sweep.prefetch import content_hash, pin_prefetched
from trainer.sweep.slurm_poll import LIVE_SLURM_STATES, SlurmError, cancel_slurm_job, slurm_jobs_tagged, slurm_state
from trainer.sweep.train_job import TrainJob
from trainer.workflows import role_facts

JOB_JSON = "job.json"
LAUNCH_LOCK = "launch.lock"
SUPERSEDED_DIR = "superseded"  # under work/: the state of earlier configs of a restarted run, kept
RESTART_HINT = (
    "to start it afresh: `python -m trainer launch ... --restart`, or with Snakemake "
    "`snakemake --config restart=RUN` (restart=all for every run that reruns)"
)


def config_json_content(
    run_config: dict[str, Any], base_model: dict[str, Any], prefetched: list[dict[str, Any]] = ()
) -> dict[str, Any]:
    """What config.json holds: the run config with the prefetched revisions pinned, the base model it
    starts from (a local model directory hashed by content), its workflow's roles (what the analysis
    reads of the workflow; facts of its code, outside the hash) and the content hash of it all."""
    cfg = {
        **pin_prefetched(run_config, list(prefetched)),
        "base_model": dict(base_model),
        **role_facts(run_config["workflow"], run_config["workflow_params"]),
    }
    path = Path(str(base_model.get("path", "")))
    if "content_hash" not in cfg["model"] and path.is_dir():
        cfg["base_model"]["content_hash"] = content_hash(path)
    cfg["config_hash"] = config_hash(cfg)
    return cfg


def rerun_trigger_items(run_config: dict[str, Any]) -> dict[str, str]:
    """`key=value` by dotted key for every leaf of the run's hashed view: the train rule's rerun trigger.

    One Snakemake param per key, so a changed key shows in the rerun reason by name
    (`before: training.learning_rate=0.002 now: ...=0.001`); launcher and resources are not in the
    hashed view, so site settings never rerun a run. The base model is left out: model.json is an
    input file of the rule, whose change reruns the run anyway.
    """

    def leaves(value: Any, path: str) -> Iterator[tuple[str, Any]]:
        if isinstance(value, dict) and value:
            for key in sorted(value):
                yield from leaves(value[key], f"{path}{key}.")
        else:
            yield path.rstrip("."), value

    view = {k: v for k, v in hashed_view(run_config).items() if k != "base_model"}
    return {key: f"{key}={json.dumps(value, sort_keys=True)}" for key, value in leaves(view, "")}


def write_run_config(run_config: dict[str, Any], base_model: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """config.json: the resolved run config, the base model it starts from, and the content hash."""
    cfg = config_json_content(run_config, base_model)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    rundir.write_json_atomic(cfg, run_dir / rundir.CONFIG_JSON)
    return cfg


def set_aside_run_state(run_dir: Path, old_hash: str) -> Path:
    """Move what a run computed under config `old_hash` (checkpoints, progress, failure, published logs
    and peak model) to work/superseded/config-HASH[-N]/ and return that folder: a restart loses nothing."""
    work = run_dir / rundir.WORK_DIR
    dest = work / SUPERSEDED_DIR / f"config-{old_hash}"
    n = 1
    while dest.exists():
        n += 1
        dest = work / SUPERSEDED_DIR / f"config-{old_hash}-{n}"
    dest.mkdir(parents=True)
    for path in (
        work / rundir.CHECKPOINTS_DIR,
        work / rundir.PROGRESS_JSON,
        work / rundir.FAILURE_JSON,
        run_dir / rundir.DONE_JSON,
        run_dir / rundir.TRAIN_PARQUET,
        run_dir / rundir.EVAL_PARQUET,
        run_dir / rundir.SAMPLES_PARQUET,
        run_dir / rundir.PEAK_DIR,
    ):
        if path.exists():
            shutil.move(str(path), str(dest / path.name))
    return dest


def job_tag(run: str, run_dir: Path) -> str:
    """The SLURM comment of the run's jobs: the run id and a hash of its absolute directory, so that
    two checkouts with the same run id never adopt each other's jobs."""
    return f"{run}@{hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:12]}"


def make_executor(cfg: dict[str, Any], folder: Path, tag: str | None = None) -> submitit.Executor:
    """The submitit executor of the run's backend, with the run's resources.

    A data-parallel run is one job of `world_size_of(resources)` tasks on one node (a process per
    GPU, or resources.processes on CPU), which form its process group (trainer/rl/distributed.py);
    the job's resources.cpus are split between them (at least one core each).
    """
    launcher = launcher_settings(cfg)
    res = from_dict(ResourceSettings, cfg["resources"], "resources")
    backend = launcher.backend
    tasks = world_size_of(cfg["resources"])
    if backend == "debug":
        if tasks > 1:
            raise LaunchError(
                f"run {cfg['run']}: launcher.backend debug runs one process, but resources ask for "
                f"{tasks}; use the local or slurm backend"
            )
        return submitit.DebugExecutor(folder=str(folder))
    if backend == "local":
        ex = submitit.LocalExecutor(folder=str(folder))
        ex.update_parameters(timeout_min=res.time_min, tasks_per_node=tasks)
        return ex
    if backend == "slurm":
        ex = submitit.SlurmExecutor(folder=str(folder), max_num_timeout=launcher.max_num_timeout)
        params: dict[str, Any] = {
            "job_name": cfg["run"],
            "time": res.time_min,
            "cpus_per_task": max(1, res.cpus // tasks),
            "mem": f"{int(res.mem_gb * 1024)}M",
            "ntasks_per_node": tasks,
            "nodes": 1,
            "signal_delay_s": launcher.signal_delay_s,
        }
        if tag:
            params["comment"] = tag
        if res.gpus:
            params["gpus_per_node"] = res.gpus
        if tasks > 1:  # a rank that fails ends its peers at once, instead of leaving them in a collective
            params["srun_args"] = ["--kill-on-bad-exit=1"]
        for key in ("partition", "account", "qos"):
            if getattr(launcher, key):
                params[key] = getattr(launcher, key)
        extra = dict(launcher.sbatch_extra)
        if "comment" in extra:
            raise LaunchError(
                f"run {cfg['run']}: launcher.sbatch_extra.comment: the launcher sets the job comment "
                f"itself (it finds a run's live job by it); remove the key"
            )
        if extra:
            params["additional_parameters"] = extra
        ex.update_parameters(**params)
        return ex
    raise LaunchError(f"launcher.backend: unknown backend {backend!r} (local, debug or slurm)")


def read_job_record(work: Path) -> dict[str, Any] | None:
    """work/job.json: the run's last submitted job, or None."""
    path = work / JOB_JSON
    return json.loads(path.read_text()) if path.exists() else None


def live_slurm_job(work: Path, tag: str | None = None) -> tuple[submitit.SlurmJob, dict[str, Any]] | None:
    """The run's SLURM job that is still queued or running, with its record: the one in work/job.json,
    else one that squeue lists under the run's tag."""
    rec = read_job_record(work)
    if rec is not None and rec.get("backend") == "slurm" and slurm_state(rec["job_id"]) in LIVE_SLURM_STATES:
        return submitit.SlurmJob(folder=rec["folder"], job_id=rec["job_id"]), rec
    tagged = slurm_jobs_tagged(tag) if tag else []
    if tagged:
        folder = str(work / "submitit")
        return submitit.SlurmJob(folder=folder, job_id=tagged[0]), {
            "backend": "slurm",
            "job_id": tagged[0],
            "folder": folder,
        }
    return None


@contextlib.contextmanager
def launch_lock(work: Path) -> Iterator[None]:
    """work/launch.lock held (blocking) while a launcher finds or submits the run's job."""
    with open(work / LAUNCH_LOCK, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def run_busy(work: Path) -> bool:
    """Whether a process holds the run's train lock (a local job of an earlier launcher still training)."""
    return rundir.lock_held(work / rundir.TRAIN_LOCK)


def wait_for_local_trainer(work: Path, run_dir: Path, poll_s: float) -> dict[str, Any]:
    """Wait for a local trainer of an earlier launcher to finish; return done.json's content."""
    while run_busy(work):
        time.sleep(poll_s)
    done = run_dir / rundir.DONE_JSON
    if not done.exists():
        raise LaunchError(f"run {run_dir.name}: the earlier local job ended without {done}; rerun to resume it")
    return json.loads(done.read_text())


def log(cfg: dict[str, Any], msg: str) -> None:
    print(f"[{cfg['run']}] {msg}", file=sys.stderr, flush=True)


def adopt_live_job(cfg: dict[str, Any], work: Path, tag: str, restart: bool) -> submitit.Job | None:
    """The run's live SLURM job, re-attached to where it runs under the current config; one of another config
    is an error, or with `restart` cancelled (None then, as where no job lives)."""
    live = live_slurm_job(work, tag)
    if live is None:
        return None
    job, rec = live
    if rec.get("config_hash", cfg["config_hash"]) == cfg["config_hash"]:
        kept = " (it runs under the current config, so it is not restarted)" if restart else ""
        log(cfg, f"re-attaching to SLURM job {job.job_id}{kept}")
        return job
    if not restart:
        raise LaunchError(
            f"run {cfg['run']}: SLURM job {job.job_id} runs it under another config "
            f"(hash {rec['config_hash']}, now {cfg['config_hash']}); wait for it, or {RESTART_HINT}"
        )
    log(cfg, f"restart: cancelling SLURM job {job.job_id} (another config)")
    try:
        cancel_slurm_job(job.job_id)
    except SlurmError as e:
        raise LaunchError(f"run {cfg['run']}: {e}") from e
    return None


def prepare_resume(cfg: dict[str, Any], run_dir: Path, restart: bool) -> None:
    """Check that the run can resume under `cfg` (with `restart`, the state of another config is set aside
    instead), then write its config.json."""
    work = run_dir / rundir.WORK_DIR
    conflict = resume_conflict(cfg, work)
    if conflict and not restart:
        raise LaunchError(f"run {cfg['run']}: cannot resume: {conflict}. Restore the config, or {RESTART_HINT}")
    if conflict:
        kept = set_aside_run_state(run_dir, checkpoint_config(work)[1]["config_hash"])
        log(cfg, f"restart: {conflict}; its state and logs are moved to {kept}, the run starts afresh")
    elif restart and checkpoint_config(work) is not None:
        log(
            cfg, f"restart: its checkpoints are of the current config, so it resumes (delete {work} to start from zero)"
        )
    rundir.write_json_atomic(cfg, run_dir / rundir.CONFIG_JSON)


def submit_job(cfg: dict[str, Any], run_dir: Path, tag: str) -> submitit.Job:
    """Submit the run's job (into a shared job array under launcher.array_window_s) and record it in work/job.json."""
    work, backend = run_dir / rundir.WORK_DIR, cfg["launcher"]["backend"]
    folder, settings = work / "submitit", launcher_settings(cfg)
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "backend": backend,
        "folder": str(folder),
        "tag": tag,
        "run": cfg["run"],
        "config_hash": cfg["config_hash"],
    }
    if backend == "slurm" and settings.array_window_s is not None:  # the submitting launcher writes job.json
        job = submit_in_array(
            make_executor(cfg, folder),
            run_dir,
            record,
            work / JOB_JSON,
            work / LAUNCH_LOCK,
            settings.array_window_s,
            min(settings.poll_interval_s, 1.0),
            lambda m: log(cfg, m),
        )
    else:
        job = make_executor(cfg, folder, tag).submit(TrainJob(), str(run_dir))
        rundir.write_json_atomic(
            {**record, "job_id": str(job.job_id), "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, work / JOB_JSON
        )
    log(cfg, f"submitted {backend} job {job.job_id}")
    return job


def find_or_submit(cfg: dict[str, Any], run_dir: Path, restart: bool) -> submitit.Job | dict[str, Any]:
    """Re-attach to the run's live job, or check that the run can resume and submit one.

    Returns the job, or done.json's content when an earlier local trainer finished the run.
    """
    work, backend = run_dir / rundir.WORK_DIR, cfg["launcher"]["backend"]
    tag = job_tag(cfg["run"], run_dir)
    job = adopt_live_job(cfg, work, tag, restart) if backend == "slurm" else None
    if job is not None:
        return job
    if backend != "slurm" and run_busy(work):
        log(cfg, "a local trainer of an earlier launcher still runs this run: waiting for it")
        return wait_for_local_trainer(work, run_dir, launcher_settings(cfg).poll_interval_s)
    prepare_resume(cfg, run_dir, restart)
    return submit_job(cfg, run_dir, tag)


def launch(
    run_config: dict[str, Any],
    base_model_json: str | Path,
    run_dir: str | Path,
    restart: bool = False,
    prefetched: list[str | Path] = (),
) -> dict[str, Any]:
    """Submit (or re-attach to) the run's job and wait for it; return done.json's content."""
    run_dir = Path(run_dir)
    base_model = json.loads(Path(base_model_json).read_text())
    cfg = config_json_content(run_config, base_model, [json.loads(Path(p).read_text()) for p in prefetched])
    work = run_dir / rundir.WORK_DIR
    work.mkdir(parents=True, exist_ok=True)
    backend = cfg["launcher"]["backend"]
    with launch_lock(work):
        try:
            job = find_or_submit(cfg, run_dir, restart)
        except (SlurmError, ArraySubmitError) as e:
            raise LaunchError(f"run {cfg['run']}: {e}") from e
    if isinstance(job, dict):
        return job
    try:
        if backend != "debug":
            wait_and_stream(job, launcher_settings(cfg).poll_interval_s, cfg=cfg, run_dir=run_dir)
        result = job.results()[0]  # rank 0's (a data-parallel job has a result per task)
    except LaunchError:
        raise
    except Exception as e:  # the job's own error: re-raise with where to look
        raise LaunchError(
            f"run {cfg['run']}: {backend} job {job.job_id} failed: {type(e).__name__}: {str(e)[-2000:]}\n"
            f"--- tail of {job.paths.stderr} ---\n{log_tail(Path(job.paths.stderr))}"
        ) from e
    if result is None:  # stopped by a signal without a requeue (e.g. max_num_timeout spent)
        raise LaunchError(
            f"run {cfg['run']}: {backend} job {job.job_id} stopped before the end (signalled, not "
            f"requeued); rerun to resume from its checkpoint"
        )
    return result
