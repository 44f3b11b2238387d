"""A checkpoint's files made durable and verifiable: fsync, a manifest written last, the check a resume makes.

A checkpoint directory is written under a temporary name, every file and directory in it fsynced, then
its manifest (rundir.MANIFEST_JSON: each file's size and SHA-256) written and fsynced, the parent fsynced,
the directory renamed into place and the parent fsynced again: a power loss at any point leaves either
the previous checkpoints alone or the new one whole. `damage` is what a resume checks before it loads one;
a damaged checkpoint is moved aside (`move_aside`) under a name that says why, never deleted.

A checkpoint without a manifest (written before manifests existed) is unverified but accepted: its
required files must exist and be non-empty, and whatever fails to load is damage as well.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from trainer.contract import rundir
from trainer.models.size import checkpoint_bytes

# what every checkpoint holds (the logs are checked too: warnings.parquet is absent from older ones)
REQUIRED = (rundir.STATE_PT, rundir.CONFIG_JSON, rundir.TRAIN_PARQUET, rundir.EVAL_PARQUET, rundir.SAMPLES_PARQUET)


def fsync_path(path: Path) -> None:
    """fsync one file or directory (a directory's fsync makes its entries, e.g. a rename, durable)."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def files_of(directory: Path) -> list[Path]:
    """Every file under `directory`, relative paths sorted, the manifest left out."""
    return sorted(
        p.relative_to(directory) for p in directory.rglob("*") if p.is_file() and p.name != rundir.MANIFEST_JSON
    )


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def seal(directory: Path) -> None:
    """fsync every file and directory under `directory`, then write and fsync its manifest (last)."""
    manifest = {}
    for rel in files_of(directory):
        fsync_path(directory / rel)
        manifest[str(rel)] = {"size": (directory / rel).stat().st_size, "sha256": sha256_of(directory / rel)}
    for sub in sorted(p for p in directory.rglob("*") if p.is_dir()):
        fsync_path(sub)
    rundir.write_json_atomic({"files": manifest}, directory / rundir.MANIFEST_JSON)  # fsyncs the file
    fsync_path(directory)


def damage(ckpt: Path) -> tuple[str, str] | None:
    """Why checkpoint `ckpt` cannot be trusted, as (reason, what): reason one of bad-manifest,
    missing-file, empty-file, size-mismatch, hash-mismatch; None when it verifies (or, without a
    manifest, has its required files, non-empty)."""
    manifest_path = ckpt / rundir.MANIFEST_JSON
    if not manifest_path.exists():
        expected = {name: None for name in REQUIRED}
    elif manifest_path.stat().st_size == 0:  # what a power loss before the data reached the disk leaves
        return "empty-file", f"{manifest_path} is empty"
    else:
        try:
            expected = json.loads(manifest_path.read_text())["files"]
            if not isinstance(expected, dict) or not expected:
                raise ValueError("no files listed")
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            return "bad-manifest", f"{manifest_path} is not a manifest ({e})"
    if not (ckpt / rundir.POLICIES_DIR).is_dir():
        return "missing-file", f"{ckpt / rundir.POLICIES_DIR} is missing"
    for rel, entry in expected.items():
        path = ckpt / rel
        if not path.is_file():
            return "missing-file", f"{path} is missing"
        size = path.stat().st_size
        if size == 0 and (entry is None or entry["size"] != 0):
            return "empty-file", f"{path} is empty"
        if entry is None:
            continue
        if size != entry["size"]:
            return "size-mismatch", f"{path} holds {size} bytes, its manifest says {entry['size']}"
        if sha256_of(path) != entry["sha256"]:
            return "hash-mismatch", f"{path}'s SHA-256 is not its manifest's"
    return None


def move_aside(ckpt: Path, reason: str) -> Path:
    """Rename a damaged checkpoint to `step-N.damaged-REASON` (a free name), durably; return the new path.

    rundir.checkpoints lists only `step-N` names, so the run never resumes from it again; it is kept
    for inspection."""
    target, n = ckpt.with_name(f"{ckpt.name}.damaged-{reason}"), 1
    while target.exists():
        n += 1
        target = ckpt.with_name(f"{ckpt.name}.damaged-{reason}-{n}")
    os.replace(ckpt, target)
    fsync_path(ckpt.parent)
    return target


class NoRoomError(RuntimeError):
    """The run's file system has no room for its next checkpoint."""


def check_room(work: Path, run_config: dict[str, Any], model_config: dict[str, Any]) -> int:
    """Fail at job start, naming the path and the bytes needed, when `work` has no room for one more
    checkpoint (trainer.models.size.checkpoint_bytes of the run and its model's config.json shape: the
    next one is written whole before the oldest is removed). Returns the bytes needed."""
    needed = checkpoint_bytes(run_config, model_config)
    free = shutil.disk_usage(work).free
    if free < needed:
        raise NoRoomError(
            f"run {run_config['run']}: {work} has {free / 2**30:.2f} GiB free, but its next checkpoint "
            f"needs about {needed / 2**30:.2f} GiB ({needed} bytes: every policy's trained parameters "
            f"and optimizer state); free space there, or put results/ on a larger file system "
            f"(--config results_dir=...)"
        )
    return needed
