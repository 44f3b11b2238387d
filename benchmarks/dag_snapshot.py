"""A snapshot of the sweep's job DAG and run hashes, to show that a change to the rules leaves them as they are.

    python -m benchmarks.dag_snapshot --root . --out /tmp/dag-after
    python -m benchmarks.dag_snapshot --compare /tmp/dag-before /tmp/dag-after

For each matrix and profile it runs `snakemake -n -p --config matrix=NAME` in the checkout `--root` (a
dry-run: nothing is built) and records every job: its rule, wildcards, inputs, outputs, log and shell
command (which holds each run's resolved config as JSON). Each train job's run config is then hashed
with the checkout's own `config_hash`, so a snapshot of an older checkout is hashed by its own code.
`--compare` prints the differences between two snapshot folders and exits 1 when there are any.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

MATRICES = ("demo", "paper", "paper_ablations")
PROFILES = ("default", "slurm")
JOB_START = re.compile(r"^(local)?rule (\w+):$")
KEPT_FIELDS = ("input", "output", "log", "wildcards", "benchmark", "priority", "resources")
# config_hash by the checkout's own code, wherever that checkout keeps it
HASHER = """
import importlib, json, pkgutil, sys
def find():
    try:
        from trainer.sweep.config import config_hash
        return config_hash
    except ImportError:
        import trainer.contract as c
        for m in pkgutil.iter_modules(c.__path__):
            mod = importlib.import_module(f"trainer.contract.{m.name}")
            if hasattr(mod, "config_hash"):
                return mod.config_hash
    raise SystemExit("no config_hash in trainer.sweep.config or trainer.contract")
config_hash = find()
print(json.dumps({run: config_hash(rc) for run, rc in json.load(sys.stdin).items()}))
"""


def parse_dry_run(text: str) -> list[dict[str, Any]]:
    """The jobs of `snakemake -n -p` output: rule, the fields in KEPT_FIELDS and the shell command, sorted."""
    jobs: list[dict[str, Any]] = []
    for line in text.splitlines():
        if jobs and line.startswith("Job stats:"):  # the table after the jobs (one comes before them too)
            break
        start = JOB_START.match(line)
        if start:
            jobs.append({"rule": start.group(2)})
        elif jobs and line.startswith("    ") and ": " in line:
            key, value = line.strip().split(": ", 1)
            if key in KEPT_FIELDS:
                jobs[-1][key] = sorted(value.split(", ")) if key in ("input", "output") else value
        elif jobs and line.startswith("Shell command: "):
            jobs[-1]["shell"] = line.removeprefix("Shell command: ")
    return sorted(jobs, key=lambda j: (j["rule"], j.get("output", []), j.get("wildcards", "")))


def run_config_of(shell: str) -> dict[str, Any]:
    """The `--run-config JSON` argument of a train job's shell command."""
    words = shlex.split(shell)
    return json.loads(words[words.index("--run-config") + 1])


def dry_run(root: Path, matrix: str, profile: str) -> list[dict[str, Any]]:
    """The jobs of one dry-run of the checkout at `root`."""
    cmd = ["snakemake", "-n", "-p", "--config", f"matrix={matrix}"]
    cmd += ["--profile", f"profiles/{profile}"] if profile != "default" else []
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} in {root} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return parse_dry_run(done.stdout + done.stderr)  # Snakemake logs the jobs to stderr


def run_hashes(root: Path, jobs: list[dict[str, Any]]) -> dict[str, str]:
    """Each train job's run id -> the config hash of its run config, by the checkout's own config_hash."""
    configs = {}
    for job in jobs:
        if job["rule"] == "train":
            rc = run_config_of(job["shell"])
            configs[rc["run"]] = rc
    done = subprocess.run(
        [sys.executable, "-c", HASHER], cwd=root, input=json.dumps(configs), capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"hashing in {root} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def snapshot(root: Path, out: Path) -> None:
    """One JSON file per matrix and profile under `out`: {"jobs": [...], "run_hashes": {...}}."""
    out.mkdir(parents=True, exist_ok=True)
    for matrix in MATRICES:
        for profile in PROFILES:
            jobs = dry_run(root, matrix, profile)
            hashes = run_hashes(root, jobs)
            path = out / f"{matrix}-{profile}.json"
            path.write_text(json.dumps({"jobs": jobs, "run_hashes": hashes}, indent=1, sort_keys=True) + "\n")
            print(f"{path}: {len(jobs)} jobs, {len(hashes)} runs")


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What differs between two snapshots of one matrix and profile (empty: identical)."""
    lines = []
    old, new = before["run_hashes"], after["run_hashes"]
    for run in sorted(set(old) | set(new)):
        if old.get(run) != new.get(run):
            lines.append(f"run {run}: hash {old.get(run)} -> {new.get(run)}")
    keyed = [{json.dumps(j, sort_keys=True) for j in s["jobs"]} for s in (before, after)]
    lines += [f"job only before: {j[:300]}" for j in sorted(keyed[0] - keyed[1])]
    lines += [f"job only after: {j[:300]}" for j in sorted(keyed[1] - keyed[0])]
    if len(before["jobs"]) != len(after["jobs"]):
        lines.append(f"job count {len(before['jobs'])} -> {len(after['jobs'])}")
    return lines


def compare(before: Path, after: Path) -> int:
    """Print each snapshot pair's verdict; 0 when every pair is identical."""
    failed = 0
    names = sorted({p.name for p in before.glob("*.json")} | {p.name for p in after.glob("*.json")})
    for name in names:
        if not (before / name).exists() or not (after / name).exists():
            print(f"{name}: only in {before if (before / name).exists() else after}")
            failed += 1
            continue
        a, b = (json.loads((d / name).read_text()) for d in (before, after))
        diff = differences(a, b)
        verdict = "identical" if not diff else f"{len(diff)} differences"
        print(f"{name}: {len(a['jobs'])} jobs, {len(a['run_hashes'])} run hashes: {verdict}")
        for line in diff[:20]:
            print(f"  {line}")
        failed += bool(diff)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path("."), help="the checkout to dry-run")
    parser.add_argument("--out", type=Path, help="write a snapshot of --root here")
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("BEFORE", "AFTER"), help="two snapshot folders")
    args = parser.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        parser.error("give --out DIR (a snapshot) or --compare BEFORE AFTER")
    snapshot(args.root.resolve(), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
