"""The runs of a sweep submitted as SLURM job arrays: one sbatch call for many runs (launcher.array_window_s).

A launcher that has to submit (after find_or_submit's checks) writes a request to the sweep's spool,
<runs>/.array-spool/<run tag>.json, and waits. Whichever waiting launcher holds the spool's lock
(another takes over when it dies) waits until the oldest pending request is array_window_s old,
groups the pending requests by executor parameters (resources, partition, ...: an array has one set),
and submits each group with submitit's map_array, in chunks of at most MaxArraySize tasks (indices
below MaxArraySize; `scontrol show config`). Each array has its own submitit folder,
<runs>/.array-jobs/<chunk>/, where task i of array A writes A_i_0_log.err and A_i_0_result.pkl.
The holder writes each run's work/job.json (job id A_i) before answering its request, so the job is
recorded even when its launcher died meanwhile.

Submitted neither twice nor never:
- a request is submitted only while its launcher lives (holds the run's work/launch.lock); a dead
  launcher's request stays pending until the run's next launcher takes it over;
- before sbatch the holder marks its requests claimed, with their array's comment and index; a holder
  that finds claimed requests (its predecessor died while submitting) looks the comment up in squeue:
  listed, it records those jobs; not listed, the requests go back to pending (had that array already
  ended and left squeue, MinJobAge after, with no launcher left to look, its runs resume from checkpoints).
Limit: an array has one comment (not each run's tag), so a run's array task is found again through
work/job.json (or its claimed request), never by squeue alone: delete job.json while the task lives
and a rerun submits a second job.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import re
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import submitit

from trainer.contract import rundir
from trainer.sweep.slurm_poll import squeue_jobs

SPOOL_DIR = ".array-spool"  # beside the runs, like slurm_poll's .squeue.json
JOBS_DIR = ".array-jobs"  # one submitit folder per array
SUBMIT_LOCK = "submit.lock"  # held by the launcher that collects and submits
ARRAY_COMMENT = "trainer-array:"
DEFAULT_MAX_ARRAY_SIZE = 1001  # SLURM's default MaxArraySize
TRAIN_JOB = "trainer.sweep.train_job:TrainJob"  # what each task runs, as module:name (tests put a sleeper here)
PENDING, CLAIMED, SUBMITTED, FAILED = "pending", "claimed", "submitted", "failed"

Log = Callable[[str], None]


class ArraySubmitError(RuntimeError):
    """The array holding a run could not be submitted; the message names its runs and sbatch's error."""


def max_array_size(log: Log) -> int:
    """The cluster's MaxArraySize (`scontrol show config`), or DEFAULT_MAX_ARRAY_SIZE, logged, if unreadable."""
    try:
        proc = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=60)
        found = re.search(r"^MaxArraySize\s*=\s*(\d+)", proc.stdout, re.MULTILINE)
        why = f"exit {proc.returncode}: {proc.stderr.strip()[:200]}" if not found else ""
    except (OSError, subprocess.TimeoutExpired) as e:
        found, why = None, f"{type(e).__name__}: {e}"
    if found:
        return max(1, int(found.group(1)))  # 0 disables arrays: then one task per submission
    log(f"could not read MaxArraySize from `scontrol show config` ({why}); using {DEFAULT_MAX_ARRAY_SIZE}")
    return DEFAULT_MAX_ARRAY_SIZE


def group_key(request: dict[str, Any]) -> str:
    """What must be equal for two requests to share an array: the sbatch parameters and the task's callable."""
    return json.dumps([request["params"], request["max_num_timeout"], request["job"]], sort_keys=True)


def plan_arrays(requests: list[dict[str, Any]], max_size: int) -> list[list[dict[str, Any]]]:
    """The arrays to submit: requests grouped by group_key, oldest first, each group cut into chunks of
    at most `max_size` (array indices 0..max_size-1, below MaxArraySize)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for request in sorted(requests, key=lambda r: (r["requested_at"], r["tag"])):
        groups.setdefault(group_key(request), []).append(request)
    return [group[i : i + max_size] for group in groups.values() for i in range(0, len(group), max_size)]


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def requests_in(spool: Path) -> list[dict[str, Any]]:
    """Every request in the spool (written atomically, so never half)."""
    found = (_read(path) for path in sorted(spool.glob("*.json")))
    return [request for request in found if request is not None]


def launcher_alive(request: dict[str, Any]) -> bool:
    """Whether a launcher holds the request's run lock (work/launch.lock: it waits for the answer)."""
    return rundir.lock_held(request["lock"])


@contextlib.contextmanager
def spool_lock(spool: Path, block: bool) -> Iterator[bool]:
    """The spool's submit lock; yields whether it is held (always, when `block`)."""
    with open(spool / SUBMIT_LOCK, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True


def record_jobs(chunk: list[dict[str, Any]], job_ids: list[str], folder: Path, comment: str) -> None:
    """Write each run's work/job.json, then answer its request (in that order: a launcher that died
    waiting leaves a recorded job, which its rerun re-attaches to)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    for request, job_id in zip(chunk, job_ids):
        rundir.write_json_atomic(
            {**request["record"], "job_id": job_id, "folder": str(folder), "submitted_at": stamp, "array": comment},
            request["job_json"],
        )
        rundir.write_json_atomic(
            {**request, "state": SUBMITTED, "job_id": job_id, "folder": str(folder)}, request["path"]
        )


def submit_chunk(spool: Path, chunk: list[dict[str, Any]], log: Log) -> None:
    """One sbatch call for the chunk (an array, or a plain job for one request); answer each request.
    A failed sbatch fails every request of the chunk with its error (each launcher raises it)."""
    chunk_id = uuid.uuid4().hex[:12]
    comment, folder = f"{ARRAY_COMMENT}{chunk_id}", spool.parent / JOBS_DIR / chunk_id
    chunk = [{**r, "state": CLAIMED, "comment": comment, "index": i, "size": len(chunk)} for i, r in enumerate(chunk)]
    for request in chunk:  # claimed first: a successor finds the array by its comment if this process dies
        rundir.write_json_atomic(request, request["path"])
    runs = ", ".join(r["run"] for r in chunk)
    try:
        ex = submitit.SlurmExecutor(folder=str(folder), max_num_timeout=chunk[0]["max_num_timeout"])
        job_name = chunk[0]["run"] + (f"+{len(chunk) - 1}" if len(chunk) > 1 else "")  # first run, how many more
        ex.update_parameters(
            **chunk[0]["params"], job_name=job_name, comment=comment, array_parallelism=len(chunk)
        )  # no throttle: as many at once as single jobs
        module, name = chunk[0]["job"].split(":")
        jobs = ex.map_array(getattr(importlib.import_module(module), name)(), [r["run_dir"] for r in chunk])
    except Exception as e:  # handed to every launcher of the chunk, which raises it
        error = f"submitting the array of runs {runs} failed: {type(e).__name__}: {str(e)[-2000:]}"
        for request in chunk:
            rundir.write_json_atomic({**request, "state": FAILED, "error": error}, request["path"])
        log(error)
        return
    record_jobs(chunk, [str(job.job_id) for job in jobs], folder, comment)
    log(
        f"submitted {len(chunk)} runs as SLURM {'array ' if len(chunk) > 1 else 'job '}{jobs[0].job_id.split('_')[0]}"
        f" ({runs})"
    )


def recover_claimed(spool: Path, log: Log) -> None:
    """Finish the submission of a holder that died: claimed requests whose array squeue lists are
    recorded; the others (never submitted) go back to pending."""
    claimed = [r for r in requests_in(spool) if r["state"] == CLAIMED]
    if not claimed:
        return
    listed: dict[str, str] = {}
    for job_id, (_, comment) in squeue_jobs().items():
        listed.setdefault(comment, job_id.split("_")[0])
    for comment in sorted({r["comment"] for r in claimed}):
        chunk = [r for r in claimed if r["comment"] == comment]
        if comment in listed:
            array = listed[comment]
            ids = [f"{array}_{r['index']}" if r["size"] > 1 else array for r in chunk]
            record_jobs(chunk, ids, spool.parent / JOBS_DIR / comment[len(ARRAY_COMMENT) :], comment)
            log(f"recorded SLURM array {array} of a launcher that died while submitting it")
        else:
            for request in chunk:
                rundir.write_json_atomic({**request, "state": PENDING}, request["path"])
            log(f"{comment} of a launcher that died is not in squeue (never submitted): its requests wait again")


def submit_pending(spool: Path, window_s: float, log: Log) -> None:
    """The holder's round (spool lock held): wait until the oldest live request is `window_s` old, then
    submit every live pending request, as few arrays as the parameters and MaxArraySize allow."""
    recover_claimed(spool, log)

    def live() -> list[dict[str, Any]]:
        return [r for r in requests_in(spool) if r["state"] == PENDING and launcher_alive(r)]

    pending = live()
    if not pending:
        return
    time.sleep(max(0.0, min(r["requested_at"] for r in pending) + window_s - time.time()))
    for chunk in plan_arrays(live(), max_array_size(log)):
        submit_chunk(spool, chunk, log)


def put_request(spool: Path, request: dict[str, Any], log: Log) -> None:
    """Write the run's request, or take over the one an earlier launcher of the run left pending or claimed."""
    path = Path(request["path"])
    old = _read(path)
    if old is None or old["state"] in (SUBMITTED, FAILED):  # a holder only ever rewrites pending or claimed ones
        rundir.write_json_atomic(request, path)
        return
    with spool_lock(spool, block=True):  # no holder is between reading and claiming it
        old = _read(path)
        if old is not None and old["state"] == PENDING:
            rundir.write_json_atomic(request, path)
        elif old is not None and old["state"] == CLAIMED:
            log("an earlier launcher's request for this run was being submitted: waiting for its outcome")


def submit_in_array(
    executor: submitit.SlurmExecutor,
    run_dir: Path,
    record: dict[str, Any],
    job_json: Path,
    lock: Path,
    window_s: float,
    poll_s: float,
    log: Log,
) -> submitit.SlurmJob:
    """Have the run's job submitted in the sweep's next array, wait for it, and return the job.

    `executor`: the run's (its parameters, not its folder, are used); `record`: its work/job.json without
    job_id, folder and submitted_at, which the submitting launcher adds; `lock`: the run's launch lock,
    which the caller holds while this waits (what marks the request live). Raises ArraySubmitError,
    naming the array's runs and sbatch's error, when the array could not be submitted.
    """
    spool = Path(run_dir).parent / SPOOL_DIR
    spool.mkdir(parents=True, exist_ok=True)
    path = spool / f"{record['tag']}.json"
    put_request(
        spool,
        {
            "state": PENDING,
            "path": str(path),
            "run": record["run"],
            "tag": record["tag"],
            "run_dir": str(run_dir),
            "job": TRAIN_JOB,
            "record": record,
            "job_json": str(job_json),
            "lock": str(lock),
            "max_num_timeout": executor.max_num_timeout,
            "requested_at": time.time(),
            "params": {k: v for k, v in executor.parameters.items() if k not in ("job_name", "comment")},
        },
        log,
    )
    log(f"waiting up to {window_s:g}s for other runs to share a SLURM array (spool {spool})")
    while True:
        answer = _read(path)
        if answer is None:
            raise ArraySubmitError(f"run {record['run']}: its array request {path} was removed while it waited")
        if answer["state"] == SUBMITTED:
            path.unlink()
            return submitit.SlurmJob(folder=answer["folder"], job_id=answer["job_id"])
        if answer["state"] == FAILED:
            path.unlink()
            raise ArraySubmitError(answer["error"])
        with spool_lock(spool, block=False) as held:
            if held:
                submit_pending(spool, window_s, log)
                continue
        time.sleep(poll_s)
