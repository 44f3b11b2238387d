"""A checkpoint that a crash damaged is survived: the resume skips it, moves it aside under a name that says
why, logs that, and resumes from the newest intact one with logs equal to an uninterrupted run's; a full
disk during a checkpoint leaves the earlier ones intact and fails naming the path; a job that starts
without room for its next checkpoint fails before its first step, naming the path and the space.

Damage as a power loss after an unsynced rename leaves it (every file of the newest checkpoint empty), a
file gone, a manifest that is not one, and a checkpoint written before manifests existed.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from tests.models import tiny_base_model
from tests.resilience import assert_same_logs, published_logs
from tests.runs import tiny_run_config
from trainer.contract import rundir
from trainer.contract.config import resume_conflict
from trainer.models.size import checkpoint_bytes
from trainer.rl.checkpoint import CheckpointWriteError
from trainer.rl.checkpoint_files import NoRoomError, damage
from trainer.rl.run import run_training
from trainer.sweep.launch import write_run_config

RUN = "voting-math-tiny-isolated-s0"  # TINY_RUN: 4 steps, checkpoints at 2 and 4
PUBLISHED = (
    rundir.TRAIN_PARQUET,
    rundir.EVAL_PARQUET,
    rundir.SAMPLES_PARQUET,
    rundir.WARNINGS_PARQUET,
    rundir.DONE_JSON,
)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A finished tiny run: checkpoints step-2 and step-4, published logs."""
    base_model = json.loads(tiny_base_model(tmp_path_factory).read_text())
    run_dir = tmp_path_factory.mktemp("damaged") / "reference"
    write_run_config(tiny_run_config(RUN), base_model, run_dir)
    run_training(run_dir)
    return run_dir


def crashed_copy(reference, tmp_path):
    """The reference run as a crash after its step-4 checkpoint leaves it: no published logs."""
    run_dir = tmp_path / "run"
    shutil.copytree(reference, run_dir)
    for name in PUBLISHED:
        (run_dir / name).unlink(missing_ok=True)
    return run_dir, rundir.checkpoint_dir(run_dir / rundir.WORK_DIR, 4)


def own_files(ckpt):
    """The checkpoint's own files (not peak/: hard links shared with work/peak)."""
    return [p for p in ckpt.rglob("*") if p.is_file() and rundir.PEAK_DIR not in p.relative_to(ckpt).parts]


def empty_every_file(ckpt):
    for path in own_files(ckpt):
        path.write_bytes(b"")


def remove_adapter(ckpt):
    next((ckpt / rundir.POLICIES_DIR).rglob("adapter_model.safetensors")).unlink()


def garble_manifest(ckpt):
    (ckpt / rundir.MANIFEST_JSON).write_text('{"files": ')


def legacy_with_empty_state(ckpt):
    """Written before manifests (none), then its state.pt lost: unverified, but an empty file is damage."""
    (ckpt / rundir.MANIFEST_JSON).unlink()
    (ckpt / rundir.STATE_PT).write_bytes(b"")


def legacy_with_garbled_state(ckpt):
    """No manifest, state.pt non-empty but not a checkpoint: caught when it fails to load."""
    (ckpt / rundir.MANIFEST_JSON).unlink()
    (ckpt / rundir.STATE_PT).write_bytes(b"\0" * 100)


@pytest.mark.slow
@pytest.mark.parametrize(
    "harm, reason",
    [
        (empty_every_file, "empty-file"),
        (remove_adapter, "missing-file"),
        (garble_manifest, "bad-manifest"),
        (legacy_with_empty_state, "empty-file"),
        (legacy_with_garbled_state, "unreadable"),
    ],
    ids=["empty-files", "missing-file", "bad-manifest", "legacy-empty", "legacy-garbled"],
)
def test_a_damaged_newest_checkpoint_is_moved_aside_and_the_run_resumes_from_the_one_before(
    reference, tmp_path, capsys, harm, reason
):
    run_dir, step4 = crashed_copy(reference, tmp_path)
    harm(step4)
    assert resume_conflict(json.loads((run_dir / rundir.CONFIG_JSON).read_text()), run_dir / rundir.WORK_DIR) is None
    run_training(run_dir)
    err = capsys.readouterr().err
    assert "checkpoint step-000004 is damaged" in err and "resumed from step-000002" in err, err
    aside = step4.with_name(f"step-000004.damaged-{reason}")
    assert aside.is_dir() and f"moved aside to {aside.name}" in err
    assert_same_logs(published_logs(reference), published_logs(run_dir))
    assert [p.name for p in rundir.checkpoints(run_dir / rundir.WORK_DIR)] == ["step-000002", "step-000004"]
    assert damage(step4) is None  # rewritten whole


@pytest.mark.slow
def test_checkpoints_without_a_manifest_resume(reference, tmp_path, capsys):
    run_dir, step4 = crashed_copy(reference, tmp_path)
    for ckpt in rundir.checkpoints(run_dir / rundir.WORK_DIR):
        (ckpt / rundir.MANIFEST_JSON).unlink()
    assert damage(step4) is None  # unverified, accepted
    run_training(run_dir)
    assert "resumed from step-000004" in capsys.readouterr().err
    assert_same_logs(published_logs(reference), published_logs(run_dir))


@pytest.mark.slow
def test_a_full_disk_during_a_checkpoint_keeps_the_one_before_and_names_the_path(reference, tmp_path, monkeypatch):
    run_dir, step4 = crashed_copy(reference, tmp_path)
    shutil.rmtree(step4)
    real_save = torch.save

    def full_disk(obj, path, *args, **kwargs):
        if "step-000004" in str(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(CheckpointWriteError, match=r"writing checkpoint .*step-000004.*No space left on device"):
        run_training(run_dir)
    ckpts = run_dir / rundir.WORK_DIR / rundir.CHECKPOINTS_DIR
    assert sorted(p.name for p in ckpts.iterdir()) == ["step-000002"]  # no partial step-4 left behind
    assert damage(ckpts / "step-000002") is None
    failure = json.loads((run_dir / rundir.WORK_DIR / rundir.FAILURE_JSON).read_text())
    assert "CheckpointWriteError" in failure["error"] and "step-000004" in failure["error"]
    monkeypatch.setattr(torch, "save", real_save)
    run_training(run_dir)
    assert_same_logs(published_logs(reference), published_logs(run_dir))


@pytest.mark.slow
def test_a_job_without_room_for_its_next_checkpoint_fails_at_once_naming_the_path_and_the_space(
    reference, tmp_path, monkeypatch
):
    run_dir = tmp_path / "full"
    run_dir.mkdir()
    shutil.copy(reference / rundir.CONFIG_JSON, run_dir / rundir.CONFIG_JSON)
    cfg = json.loads((run_dir / rundir.CONFIG_JSON).read_text())
    ckpt = rundir.checkpoint_dir(reference / rundir.WORK_DIR, 2)
    trained = sum(
        p.stat().st_size for p in [ckpt / rundir.STATE_PT, *(ckpt / rundir.POLICIES_DIR).rglob("*")] if p.is_file()
    )
    shape = json.loads(next((ckpt / rundir.POLICIES_DIR).rglob("adapter_config.json")).read_text())  # the adapter's
    model_config = json.loads((Path(cfg["base_model"]["path"]) / "config.json").read_text())
    needed = checkpoint_bytes(cfg, model_config)
    assert shape["r"] == cfg["training"]["lora"]["r"] and 0.9 * trained < needed <= trained, (needed, trained)
    usage = shutil.disk_usage(run_dir)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=needed - 1))
    with pytest.raises(
        NoRoomError,
        match=rf"{run_dir / rundir.WORK_DIR} has 0.00 GiB free, but its next checkpoint "
        rf"needs about .* GiB \({needed} bytes",
    ):
        run_training(run_dir)
    assert not (run_dir / rundir.WORK_DIR / rundir.PROGRESS_JSON).exists()  # at once: before the first eval
    assert "NoRoomError" in json.loads((run_dir / rundir.WORK_DIR / rundir.FAILURE_JSON).read_text())["error"]
