"""Superseded state under results/runs, removed (`python -m trainer clean`); a finished run is never touched.

Superseded, in a run that is not finished (no done.json) and that no process trains (work/train.lock free):
- checkpoints a killed write or delete left half-done (work/checkpoints/.step-*),
- checkpoints moved aside as damaged (work/checkpoints/step-NNNNNN.damaged-REASON),
- checkpoints older than the newest `training.keep_last` of the run's config.json (after keep_last was lowered),
- temporary files of atomic writes whose writer is dead (`.NAME.tmp-PID`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from trainer.contract import rundir


def trainer_holds(work: Path) -> bool:
    """Whether a process holds the run's train lock (it is training now)."""
    return rundir.lock_held(work / rundir.TRAIN_LOCK)


def _dead_temporaries(run_dir: Path) -> list[Path]:
    """`.NAME.tmp-PID` files in the run directory and work/ whose writer no longer runs on this host."""
    found = [*run_dir.glob(".*.tmp-*"), *(run_dir / rundir.WORK_DIR).glob(".*.tmp-*")]
    return [
        p
        for p in found
        if not (p.name.rsplit("-", 1)[-1].isdigit() and rundir.pid_alive(int(p.name.rsplit("-", 1)[-1])))
    ]


def superseded(run_dir: Path) -> list[Path]:
    """What `clean` removes from one run directory (see the module docstring); nothing from a finished run."""
    work = run_dir / rundir.WORK_DIR
    if (run_dir / rundir.DONE_JSON).exists() or not work.is_dir() or trainer_holds(work):
        return []
    found = rundir.incomplete_checkpoints(work)
    found += sorted(p for p in (work / rundir.CHECKPOINTS_DIR).glob("step-*.damaged*"))
    config_path = run_dir / rundir.CONFIG_JSON
    if config_path.exists():
        keep = int(json.loads(config_path.read_text())["training"].get("keep_last", 0))
        whole = rundir.checkpoints(work)
        found += whole[:-keep] if keep > 0 else []
    return found + _dead_temporaries(run_dir)


def size_of(path: Path) -> int:
    """Bytes under a path (files counted once per inode: checkpoints hard-link the peak)."""
    if path.is_file():
        return path.stat().st_size
    seen, total = set(), 0
    for root, _, files in os.walk(path):
        for name in files:
            st = os.lstat(os.path.join(root, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def clean(results: str | Path, dry_run: bool = False) -> list[tuple[Path, int]]:
    """Remove (or, dry_run, only list) every run's superseded state; (path, bytes) of each."""
    removed = []
    for run_dir in sorted((Path(results) / "runs").glob("*")):
        for path in superseded(run_dir):
            removed.append((path, size_of(path)))
            if not dry_run:
                shutil.rmtree(path) if path.is_dir() else path.unlink()
    return removed
