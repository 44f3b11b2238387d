"""Helpers of the kill, resume and SLURM tests: a tiny base model built once per session, tiny run
configs, and the checks that a run's published files are whole and equal to another run's."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from tests.conftest import PACKAGE_LINKS, ROOT, copy_workflow
from trainer.contract import rundir
from trainer.contract.runid import parse_run_id
from trainer.sweep.config import base_model_spec, load_yaml, resolve_run_config

TINY_RUN = {
    "max_steps": 4,
    "eval_every": 2,
    "save_every": 2,
    "keep_last": 3,
    "prompts_per_step": 4,
    "num_generations": 4,
    "eval_problems": 24,
    "samples_per_eval": 2,
}
# TEST_FLOAT_ORDER=N (docs/testing.md) runs the tests under another float summation order: the warm start's
# micro-batch split, the RL update's micro-batch size and the threads of every trainer differ, so a test that
# rests on one CPU's float trajectory fails here as it would on another CPU. 0 (the default): none.
FLOAT_ORDERS = {
    0: {"warm_start_micro_batches": None, "micro_batch_tokens": None, "threads": 1},
    1: {"warm_start_micro_batches": 2, "micro_batch_tokens": 1024, "threads": 2},
    2: {"warm_start_micro_batches": 8, "micro_batch_tokens": 256, "threads": 1},
}
FLOAT_ORDER = int(os.environ.get("TEST_FLOAT_ORDER", "0"))
if FLOAT_ORDER not in FLOAT_ORDERS:
    raise ValueError(f"TEST_FLOAT_ORDER={FLOAT_ORDER}: not one of {sorted(FLOAT_ORDERS)}")
PERTURB = FLOAT_ORDERS[FLOAT_ORDER]
FAST_ENV = {
    "GLIBC_TUNABLES": "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736",
    "OMP_NUM_THREADS": str(PERTURB["threads"]),
    "TOKENIZERS_PARALLELISM": "false",
}


def tiny_base_model(
    tmp_path_factory,
    warm_start_steps: int = 100,
    tasks: tuple[str, ...] = ("math",),
    workflows: tuple[str, ...] | None = None,
) -> Path:
    """model.json of the tiny base model, built once per test session (shared by the test modules):
    config.yaml's tiny scale warm-started for `warm_start_steps` on the demonstrations of `tasks`
    in the formats of `workflows` (default: every workflow of config.yaml).

    Built by `python -m trainer base-model` in a subprocess with the trainer's CPU settings (one
    OpenMP thread, no malloc trimming): in the pytest process, torch's default threads on a busy
    2-core machine made the warm start several times slower.
    """
    name = f"tiny-model-{warm_start_steps}-{'-'.join(tasks)}" + (f"-{'-'.join(workflows)}" if workflows else "")

    def build(out: Path) -> None:
        spec = base_model_spec(load_yaml(ROOT / "config.yaml"), "tiny", list(tasks))
        spec["tiny"]["warm_start_steps"] = warm_start_steps
        if PERTURB["warm_start_micro_batches"]:
            spec["tiny"]["warm_start_micro_batches"] = PERTURB["warm_start_micro_batches"]
        for entry in spec["tasks"].values():
            entry["workflows"] = {w: p for w, p in entry["workflows"].items() if not workflows or w in workflows}
        proc = subprocess.run(
            [sys.executable, "-m", "trainer", "base-model", "--spec", json.dumps(spec), "--out", str(out)],
            cwd=ROOT,
            env=trainer_env(),
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0 and out.exists(), f"building the tiny base model failed:\n{proc.stderr[-3000:]}"

    return built_once(tmp_path_factory, name, build)


def damaged_tiny_base_model(tmp_path_factory, *args: Any) -> Path:
    """model.json of a damaged copy of `tiny_base_model(*args)` (tests/planted.py): it gets every answer
    wrong, on any CPU; the planted LoRA factors beside it restore the original."""
    from tests.planted import damaged_base_model

    source = tiny_base_model(tmp_path_factory, *args)
    lora = tiny_run_config("single-math-tiny-shared-s0")["training"]["lora"]
    return built_once(
        tmp_path_factory,
        f"{source.parent.name}-damaged",
        lambda out: damaged_base_model(source, out.parent, lora["r"], lora["lora_alpha"]),
    )


def built_once(tmp_path_factory, name: str, build: Callable[[Path], Any]) -> Path:
    """`cache/name/model.json`, made by `build(path)` once per test session; several modules (or pytest
    workers, which share the parent of their base temp) may ask at once."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "models" / name
    root.mkdir(parents=True, exist_ok=True)
    out = root / "model.json"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not out.exists():
            build(out)
    return out


def workflow_copy(d: Path, tmp_path_factory, links: tuple[str, ...] = PACKAGE_LINKS) -> Path:
    """copy_workflow(d) with the session's tiny base model in place of the tiny scale's, so Snakemake
    trains without rebuilding it."""
    copy_workflow(d, links)
    model_json = d / "results" / "models" / "tiny" / "model.json"
    model_json.parent.mkdir(parents=True)
    shutil.copy(tiny_base_model(tmp_path_factory), model_json)
    return d


def tiny_run_config(run: str, training: dict[str, Any] | None = None, **launcher: Any) -> dict[str, Any]:
    """The resolved config of `run` from config.yaml with a tiny schedule (TINY_RUN, then `training`)."""
    rc = resolve_run_config(load_yaml(ROOT / "config.yaml"), parse_run_id(run))
    rc["training"].update({**TINY_RUN, **(training or {})})
    rc["launcher"].update(launcher)
    if PERTURB["micro_batch_tokens"]:
        rc["training"]["micro_batch_tokens"] = PERTURB["micro_batch_tokens"]
    rc["resources"]["cpus"] = PERTURB["threads"]  # the trainer's torch threads
    return rc


def published_logs(run_dir: Path) -> dict[str, pd.DataFrame]:
    """train/eval/samples parquet of a run without the time columns (the only ones that may differ)."""
    out = {}
    for name in ("train", "eval", "samples"):
        df = pd.read_parquet(run_dir / f"{name}.parquet")
        out[name] = df.drop(columns=[c for c in rundir.TIME_COLUMNS if c in df.columns])
    return out


def assert_same_logs(a: dict[str, pd.DataFrame], b: dict[str, pd.DataFrame]) -> None:
    """Every log frame equal, exactly."""
    assert set(a) == set(b)
    for name in a:
        pd.testing.assert_frame_equal(a[name], b[name], check_exact=True, obj=name)


def temporaries(run_dir: Path) -> list[Path]:
    """Leftovers of interrupted atomic writes: `.NAME.tmp-PID` files and `.step-*` checkpoint dirs."""
    found = [*run_dir.glob(".*.tmp*"), *(run_dir / rundir.WORK_DIR).glob(".*.tmp*")]
    found += list((run_dir / rundir.WORK_DIR / "checkpoints").glob(".*"))
    return sorted(found)


def assert_nothing_partial(run_dir: Path, done: bool = True) -> None:
    """Nothing half-written among the run's files: no temporaries; every parquet (published and in
    each checkpoint) readable; every checkpoint whole; and, when `done`, done.json consistent with
    config.json and the parquet files (all steps, each (step, role) and (step, split) once)."""
    assert not temporaries(run_dir), f"{run_dir}: leftovers of interrupted writes: {temporaries(run_dir)}"
    for path in [*run_dir.glob("*.parquet"), *(run_dir / rundir.WORK_DIR).glob("checkpoints/step-*/*.parquet")]:
        pq.read_table(path)  # raises on a truncated file
    for ckpt in (run_dir / rundir.WORK_DIR / "checkpoints").glob("step-*"):
        for name in (
            "state.pt",
            rundir.CONFIG_JSON,
            rundir.TRAIN_PARQUET,
            rundir.EVAL_PARQUET,
            rundir.SAMPLES_PARQUET,
            "policies",
        ):
            assert (ckpt / name).exists(), f"{ckpt}: no {name}"
    if not done:
        return
    config = json.loads((run_dir / rundir.CONFIG_JSON).read_text())
    finished = json.loads((run_dir / rundir.DONE_JSON).read_text())
    steps = config["training"]["max_steps"]
    assert finished["config_hash"] == config["config_hash"], f"{run_dir}: done.json's hash is not config.json's"
    assert finished["steps_done"] == finished["steps_expected"] == steps
    train = pd.read_parquet(run_dir / rundir.TRAIN_PARQUET)
    evals = pd.read_parquet(run_dir / rundir.EVAL_PARQUET)
    assert sorted(train["step"].unique()) == list(range(1, steps + 1)), f"{run_dir}: train steps"
    assert not train.duplicated(["step", "role"]).any(), f"{run_dir}: a (step, role) row twice"
    assert not evals.duplicated(["step", "split"]).any(), f"{run_dir}: a (step, split) row twice"
    assert evals["step"].max() == steps and evals["step"].min() == 0
    samples = pd.read_parquet(run_dir / rundir.SAMPLES_PARQUET)
    assert set(samples["step"]) <= set(evals["step"])


def trainer_env(**extra: str) -> dict[str, str]:
    """The environment of a trainer subprocess: this checkout first on the path, fast CPU settings."""
    return {**os.environ, **FAST_ENV, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}", **extra}


def start_trainer(run_dir: Path, log: Path, **env: str) -> subprocess.Popen:
    """`python -m trainer train --run-dir RUN` in a subprocess, its output appended to `log`."""
    with open(log, "a") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "trainer", "train", "--run-dir", str(run_dir)],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=trainer_env(**env),
        )


def progress_step(run_dir: Path) -> int:
    """The step in work/progress.json (-1 before the trainer wrote it)."""
    path = run_dir / rundir.WORK_DIR / rundir.PROGRESS_JSON
    return json.loads(path.read_text())["step"] if path.exists() else -1


def wait_for(
    condition: Callable[[], bool], proc: subprocess.Popen | None, timeout_s: float, what: str, log: Path | None = None
) -> None:
    """Poll `condition` every 20 ms; fail if the process ends first or the timeout passes."""
    deadline = time.time() + timeout_s
    while not condition():
        tail = log.read_text()[-3000:] if log and log.exists() else ""
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process ended ({proc.returncode}) before {what}\n{tail}")
        if time.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}\n{tail}")
        time.sleep(0.02)


def copy_run_dir(src: Path, dst: Path) -> Path:
    """A copy of a run directory (to compare what happens to it under two histories)."""
    shutil.copytree(src, dst)
    return dst
