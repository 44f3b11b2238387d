"""`python -m trainer clean`: superseded state of unfinished runs is removed (half-written, damaged
and surplus checkpoints, dead temporaries); a finished run and a run being trained are never touched."""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
from pathlib import Path

from tests.workflow import ROOT
from trainer.contract import rundir
from trainer.sweep.clean import clean

DEAD_PID = 2**22 + 12345  # above the kernel's pid_max default: no such process


def fake_run(results: Path, name: str, done: bool = False) -> tuple[Path, list[Path], list[Path]]:
    """A run directory with three whole checkpoints (keep_last 2) and superseded state; (dir, kept, superseded)."""
    run = results / "runs" / name
    work = run / rundir.WORK_DIR
    ckpts = work / rundir.CHECKPOINTS_DIR
    whole = [rundir.checkpoint_dir(work, s) for s in (2, 4, 6)]
    junk = [
        rundir.checkpoint_tmp_dir(work, 8),
        ckpts / "step-000005.damaged-empty-files",
        run / f".train.parquet.tmp-{DEAD_PID}",
    ]
    for d in whole + junk[:2]:
        (d / "policies").mkdir(parents=True)
        (d / rundir.STATE_PT).write_bytes(b"x" * 1000)
    junk[2].write_bytes(b"y" * 10)
    (run / rundir.CONFIG_JSON).write_text(json.dumps({"training": {"keep_last": 2}}))
    if done:
        (run / rundir.DONE_JSON).write_text("{}")
    return run, whole[1:] + [run / rundir.CONFIG_JSON], [whole[0]] + junk


def test_clean_removes_superseded_state_and_never_a_finished_or_running_run(tmp_path):
    results = tmp_path / "results"
    _, kept, junk = fake_run(results, "voting-math-tiny-shared-s0")
    finished, _, finished_junk = fake_run(results, "voting-code-tiny-shared-s0", done=True)
    running, _, running_junk = fake_run(results, "single-math-tiny-shared-s0")
    with open(running / rundir.WORK_DIR / rundir.TRAIN_LOCK, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a trainer holds it
        listed = clean(results, dry_run=True)
        assert sorted(p for p, _ in listed) == sorted(junk) and all(p.exists() for p in junk)
        assert dict(listed)[junk[0]] == 1000
        removed = clean(results)
    assert sorted(p for p, _ in removed) == sorted(junk)
    assert not any(p.exists() for p in junk) and all(p.exists() for p in kept)
    assert all(p.exists() for p in finished_junk + running_junk)


def test_clean_command_lists_then_removes(tmp_path):
    results = tmp_path / "results"
    _, _, junk = fake_run(results, "voting-math-tiny-shared-s0")
    cmd = [sys.executable, "-m", "trainer", "clean", "--results", str(results)]
    dry = subprocess.run(cmd + ["--dry-run"], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert f"would remove {junk[0]}" in dry and "4 paths" in dry and all(p.exists() for p in junk)
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert f"removed {junk[0]}" in out and not any(p.exists() for p in junk)


def test_results_dir_puts_every_output_on_another_file_system(workdir, tmp_path):
    from tests.workflow import snakemake

    scratch = tmp_path / "scratch" / "results"
    out = snakemake("-n", "--config", f"results_dir={scratch}", f"hf_home={tmp_path / 'hf'}", cwd=workdir).stdout
    assert f"{scratch}/runs/voting-math-tiny-shared-s0/done.json" in out
    assert "results/runs/" not in out.replace(f"{scratch}/runs/", "")
