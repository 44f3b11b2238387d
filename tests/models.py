"""The tiny base models of the tests, each built once per test session whatever the pytest worker
(`built_once`), and their damaged copies (tests/planted.py) that get every answer wrong on any CPU."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.float_order import PERTURB, trainer_env
from tests.planted import damaged_base_model
from tests.workflow import ROOT
from trainer.contract.runid import parse_run_id
from trainer.sweep.config import base_model_spec, load_yaml, resolve_run_config

LORA_RUN = "single-math-tiny-shared-s0"  # whose adapter shape the damaged copies plant their factors for


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
    source = tiny_base_model(tmp_path_factory, *args)
    lora = resolve_run_config(load_yaml(ROOT / "config.yaml"), parse_run_id(LORA_RUN))["training"]["lora"]
    return built_once(
        tmp_path_factory,
        f"{source.parent.name}-damaged",
        lambda out: damaged_base_model(source, out.parent, lora["r"], lora["lora_alpha"]),
    )
