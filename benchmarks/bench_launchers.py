"""100 runs in flight on a SLURM cluster: squeue/sacct calls per minute and the launchers' memory,
the shared snapshot (trainer.sweep.slurm_poll) against one squeue call per launcher, side by side.

Usage (on the CI cluster, .ci/slurm-up): python benchmarks/bench_launchers.py [--runs 100] [--poll 5]
    [--window 30] [--array [--array-window 60]]

Submits --runs short sleeping jobs, held in the queue (PENDING: in flight, using no node),
then, for each mode, starts one launcher process per job running the launcher's real wait loop
(trainer.sweep.job_watch.wait_and_stream) with PATH led by a shim that logs every squeue and sacct
call, counts the calls over --window seconds once all launchers wait, and reads each launcher's
resident memory (VmRSS). Every job is cancelled at the end.

With --array it measures submission instead: --runs real launchers (`python -m trainer launch`) started
together, one job per run and then launcher.array_window_s (trainer/sweep/array_submit.py), their jobs
held (sbatch_extra hold: in the queue, never run); sbatch calls, queue entries and the seconds until
every run's work/job.json records its job. Its figures, with their machine: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHIM = """#!/bin/sh
echo "$(date +%s.%N) {name}" >> {log}
exec {real} "$@"
"""


def make_shim(folder: Path, log: Path, names: tuple[str, ...] = ("squeue", "sacct")) -> Path:
    """A folder of wrappers of `names` that log each call to `log`, then run the real command."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        real = shutil.which(name) or f"/usr/bin/{name}"
        (folder / name).write_text(SHIM.format(name=name, log=log, real=real))
        (folder / name).chmod(0o755)
    return folder


def submit_sleepers(n: int, folder: Path) -> list[str]:
    """n sleeping batch jobs, held (PENDING, in flight, taking no CPU from other users of the cluster); their ids."""
    ids = []
    for i in range(n):
        out = subprocess.run(
            [
                "sbatch",
                "--parsable",
                "--job-name",
                "bench-launcher",
                "--cpus-per-task",
                "1",
                "--mem",
                "20M",
                "--hold",
                "--output",
                str(folder / f"sleep-{i}.out"),
                "--wrap",
                "sleep 60",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        ids.append(out.strip().split(";")[0])
    return ids


def wait_one(job_id: str, folder: str, poll: float, shared: str | None, ready: str) -> None:
    """One launcher: the real wait loop on job `job_id` (never returns while the job waits)."""
    import submitit

    from trainer.sweep.job_watch import wait_and_stream

    assert "torch" not in sys.modules and "pandas" not in sys.modules, "the launcher imported torch or pandas"
    job = submitit.SlurmJob(folder=folder, job_id=job_id)
    Path(ready).touch()
    run_dir = Path(shared) / f"run-{job_id}" if shared else None
    with open(os.devnull, "w") as out:
        wait_and_stream(job, poll, out=out, run_dir=run_dir)


def rss_mb(pid: int) -> float:
    """A process's resident memory in MB (/proc/PID/status VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(mode: str, ids: list[str], tmp: Path, poll: float, window: float) -> dict[str, float]:
    """Start one launcher per job in `mode` (shared | each), count calls over `window` s, read RSS."""
    log = tmp / f"calls-{mode}.log"
    shim = make_shim(tmp / f"shim-{mode}", log)
    shared = tmp / f"runs-{mode}"
    shared.mkdir()
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    procs = []
    for job_id in ids:
        ready = tmp / f"ready-{mode}-{job_id}"
        code = (
            f"from benchmarks.bench_launchers import wait_one; wait_one({job_id!r}, {str(tmp / 'jobs')!r}, "
            f"{poll}, {str(shared) if mode == 'shared' else None!r}, {str(ready)!r})"
        )
        procs.append((subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT), ready))
    try:
        while not all(r.exists() for _, r in procs):
            if any(p.poll() is not None for p, _ in procs):
                raise SystemExit(f"a {mode} launcher exited early ({[p.returncode for p, _ in procs if p.poll()]})")
            time.sleep(0.5)
        time.sleep(poll)  # every launcher past its first look
        t0 = time.time()
        time.sleep(window)
        t1 = time.time()
        rss = [rss_mb(p.pid) for p, _ in procs]
    finally:
        for p, _ in procs:
            p.terminate()
        for p, _ in procs:
            p.wait()
    calls = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    inside = [name for t, name in calls if t0 <= float(t) <= t1]
    per_min = 60 / (t1 - t0)
    return {
        "squeue_per_min": inside.count("squeue") * per_min,
        "sacct_per_min": inside.count("sacct") * per_min,
        "rss_mean_mb": sum(rss) / len(rss),
        "rss_total_mb": sum(rss),
    }


def import_rss_mb(modules: str) -> float:
    """Resident memory of a Python process once it has imported `modules` (a comma list)."""
    code = f"import {modules}; from pathlib import Path; print(Path('/proc/self/status').read_text())"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ).stdout
    return next(int(line.split()[1]) / 1024 for line in out.splitlines() if line.startswith("VmRSS:"))


def measure_submissions(n: int, tmp: Path, window_s: float | None) -> dict[str, float]:
    """n launchers started together (arrays on when `window_s` is set): sbatch calls, queue entries and
    seconds until every run's job.json records its job; the launchers are then stopped, the jobs cancelled."""
    from trainer.contract.runid import parse_run_id
    from trainer.sweep.config import load_yaml, resolve_run_config

    mode = "single" if window_s is None else "array"
    log, runs = tmp / f"sbatch-{mode}.log", tmp / f"runs-{mode}"
    env = {
        **os.environ,
        "PATH": f"{make_shim(tmp / f'shim-{mode}', log, ('sbatch',))}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
    }
    base = tmp / "model.json"
    base.write_text('{"name": "tiny", "path": "/nonexistent"}')
    procs, t0 = [], time.time()
    for i in range(n):
        rc = resolve_run_config(load_yaml(ROOT / "config.yaml"), parse_run_id(f"single-math-tiny-shared-s{i}"))
        rc["launcher"].update(
            backend="slurm", partition="debug", poll_interval_s=5, array_window_s=window_s, sbatch_extra={"hold": True}
        )
        rc["resources"].update(cpus=1, mem_gb=0.1, time_min=5)
        cmd = [
            sys.executable,
            "-m",
            "trainer",
            "launch",
            "--run-config",
            json.dumps(rc),
            "--base-model",
            str(base),
            "--run-dir",
            str(runs / rc["run"]),
        ]
        procs.append(subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        while len(list(runs.glob("*/work/job.json"))) < n:
            if any(p.poll() is not None for p in procs):
                raise SystemExit(f"a {mode} launcher exited early ({[p.returncode for p in procs if p.poll()]})")
            time.sleep(0.2)
        took = time.time() - t0
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
        ids = {json.loads(r.read_text())["job_id"].split("_")[0] for r in runs.glob("*/work/job.json")}
        subprocess.run(["scancel", *ids], capture_output=True)
    return {"sbatch": len(log.read_text().splitlines()), "entries": len(ids), "seconds": took}


def compare_submissions(n: int, window_s: float) -> None:
    """Print sbatch calls with and without arrays for n runs submitted together."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-arrays-"))
    results = {
        label: measure_submissions(n, tmp, w)
        for label, w in (("one job per run", None), (f"arrays, window {window_s:g}s", window_s))
    }
    print(f"{n} launchers started together (jobs held, never run)")
    print(f"{'mode':<24} {'sbatch calls':>12} {'array/job ids':>13} {'s until all recorded':>21}")
    for label, r in results.items():
        print(f"{label:<24} {r['sbatch']:>12} {r['entries']:>13} {r['seconds']:>21.1f}")
    shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--poll", type=float, default=5.0, help="launcher.poll_interval_s")
    parser.add_argument("--window", type=float, default=30.0, help="seconds over which calls are counted")
    parser.add_argument(
        "--array",
        action="store_true",
        help="measure submission: sbatch calls with and without job arrays (launcher.array_window_s)",
    )
    parser.add_argument("--array-window", type=float, default=60.0, help="launcher.array_window_s with --array")
    args = parser.parse_args()
    if shutil.which("sbatch") is None:
        raise SystemExit("no SLURM here: start the CI cluster with `bash .ci/slurm-up`")
    if args.array:
        return compare_submissions(args.runs, args.array_window)
    tmp = Path(tempfile.mkdtemp(prefix="bench-launchers-"))
    (tmp / "jobs").mkdir()
    ids = submit_sleepers(args.runs, tmp / "jobs")
    try:
        results = {mode: measure(mode, ids, tmp, args.poll, args.window) for mode in ("each", "shared")}
    finally:
        subprocess.run(["scancel", *ids], capture_output=True)
    print(f"{args.runs} runs in flight, poll {args.poll:g}s, calls counted over {args.window:g}s")
    print(f"{'mode':<28} {'squeue/min':>10} {'sacct/min':>10} {'RSS/launcher MB':>16} {'RSS total MB':>13}")
    for mode, label in (("each", "one squeue per launcher"), ("shared", "shared snapshot")):
        r = results[mode]
        print(
            f"{label:<28} {r['squeue_per_min']:>10.1f} {r['sacct_per_min']:>10.1f} {r['rss_mean_mb']:>16.1f} "
            f"{r['rss_total_mb']:>13.0f}"
        )
    each, shared = results["each"], results["shared"]
    calls = (each["squeue_per_min"] + each["sacct_per_min"]) / max(
        shared["squeue_per_min"] + shared["sacct_per_min"], 1e-9
    )
    print(
        f"ratio of scheduler calls, one-per-launcher / shared: {calls:.1f}x "
        f"(ideal {args.runs}x: one call per poll interval for the sweep)"
    )
    before = import_rss_mb("pandas, pyarrow.parquet, trainer.sweep.launch")  # rundir imported them eagerly
    now = import_rss_mb("trainer.sweep.launch")
    print(
        f"launcher imports: {now:.0f} MB now, {before:.0f} MB with pandas/pyarrow as before "
        f"({before / now:.1f}x; torch never imported)"
    )
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
