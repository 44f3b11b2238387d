"""Shared fixtures: the repository root and a runner for the snakemake CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def snakemake(*args: str, cwd: Path = ROOT, timeout: int = 600, check: bool = True) -> subprocess.CompletedProcess:
    """Run the snakemake CLI of this environment; on failure show its output."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    proc = subprocess.run(
        [str(BIN / "snakemake"), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


PACKAGE_LINKS = ("trainer", "analysis", "benchmarks")  # this checkout's packages, linked into a workflow copy


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


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A copy of the workflow (Snakefile, rules, config, profiles) in a temporary directory."""
    return copy_workflow(tmp_path)
