"""The whole analysis of a paper-sized sweep through `snakemake figures`, timed end to end and per stage.

Usage: python benchmarks/bench_analysis.py [--steps 500] [--multi-only] [--keep DIR] [--cores 2]

Writes planted synthetic logs (tests/synthetic_logs.py) for the paper matrix (108 multi-agent runs, plus
its 18 single-agent baselines unless --multi-only) into a copy of the workflow, runs `snakemake figures` and
prints the total and the split: snakemake startup and DAG (the dry run), the jobs' Python start-up, loading and
summarising the runs, the tables, and each figure (from the jobs' `timing` log lines and benchmark files).
Generating the logs is not timed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.synthetic_logs import planted_run  # noqa: E402
from tests.workflow import copy_workflow  # noqa: E402
from trainer.sweep.config import expand_matrix, load_yaml  # noqa: E402

TIMING = re.compile(r"^timing (\S+) ([0-9.]+)s$", re.MULTILINE)


def snakemake(args: list[str], cwd: Path) -> float:
    """Seconds one snakemake command takes; its output shown if it fails."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    t = time.perf_counter()
    proc = subprocess.run([str(bin_dir / "snakemake"), *args], cwd=cwd, capture_output=True, text=True, env=env)
    if proc.returncode:
        raise SystemExit(f"snakemake {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return time.perf_counter() - t


def job_seconds(path: Path) -> float:
    """Wall seconds of one job from its Snakemake benchmark file."""
    header, row = path.read_text().splitlines()[:2]
    return float(dict(zip(header.split("\t"), row.split("\t")))["s"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--multi-only", action="store_true", help="the 108 multi-agent runs, no single baselines")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--keep", help="write the tree here and keep it (default: a temporary directory)")
    args = parser.parse_args()

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_analysis_"))
    work.mkdir(parents=True, exist_ok=True)
    copy_workflow(work)
    config = load_yaml(work / "config.yaml")
    config["matrix"] = "paper"
    if args.multi_only:
        config["matrices"]["paper"]["single_baseline"] = False
    runs = [str(r) for r in expand_matrix(config)]
    t = time.perf_counter()
    for r in runs:
        planted_run(work / "results" / "runs" / r, r, steps=args.steps)
    print(f"wrote {len(runs)} runs x {args.steps} steps in {time.perf_counter() - t:.1f}s (not timed) under {work}")

    cfg = ["--config", "matrix=paper"]
    if args.multi_only:
        cfg += ["matrices={paper: {single_baseline: false}}"]
    dag = snakemake(["figures", "-n", *cfg], work)
    total = snakemake(["figures", "--cores", str(args.cores), *cfg], work)

    results = work / "results"
    logs = (results / "logs" / "analyse.log").read_text() + (results / "logs" / "plot_figures.log").read_text()
    stages = {k: float(v) for k, v in TIMING.findall(logs)}
    jobs = {"figures": job_seconds(results / "benchmarks" / "figures.tsv")}  # one job: analyse, then plot
    inside = {
        "figures": stages["load_and_summarise_runs"]
        + stages["tables"]
        + sum(v for k, v in stages.items() if k.startswith("figure"))
    }
    print(f"\n`snakemake figures` on {len(runs)} runs: {total:.2f}s total (target <= 30s)")
    print(f"  snakemake startup + DAG (dry run)     {dag:6.2f}s")
    print(f"  snakemake scheduling, other           {total - dag - sum(jobs.values()):6.2f}s")
    for job in jobs:
        print(f"  job {job:<10} {jobs[job]:6.2f}s  (its two python start-ups + imports {jobs[job] - inside[job]:.2f}s)")
    for k, v in stages.items():
        print(f"    {k:<34} {v:6.2f}s")
    if not args.keep:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
