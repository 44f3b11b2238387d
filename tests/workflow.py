"""The workflow under test: this checkout's root, the snakemake CLI of this environment, and copies of
the workflow (Snakefile, config, rules, profiles, envs) in a temporary directory."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PACKAGE_LINKS = ("trainer", "analysis")  # this checkout's packages, linked into a workflow copy


def snakemake(*args: str, cwd: Path = ROOT, timeout: int = 600, check: bool = True) -> subprocess.CompletedProcess:
    """Run the snakemake CLI of this environment; on failure show its output."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    proc = subprocess.run(
        [str(BIN / "snakemake"), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def copy_workflow(d: Path, links: tuple[str, ...] = PACKAGE_LINKS) -> Path:
    """A copy of the workflow in `d`: Snakefile, config, rules, profiles and envs copied, and this
    checkout's packages linked in (else `python -m trainer` in the copy would run an installed copy's code)."""
    for name in ("Snakefile", "config.yaml"):
        shutil.copy(ROOT / name, d / name)
    for name in ("rules", "profiles", "envs"):
        shutil.copytree(ROOT / name, d / name)
    for name in links:
        (d / name).symlink_to(ROOT / name)
    return d


def train_runs(dry_run_output: str) -> Counter:
    """run id -> number of `train` jobs in a dry-run's output."""
    blocks = re.findall(r"^rule train:\n(.*?)(?=^\S|\Z)", dry_run_output, flags=re.MULTILINE | re.DOTALL)
    return Counter(m for b in blocks for m in re.findall(r"wildcards: run=(\S+)", b))
