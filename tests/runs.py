"""Tiny runs of config.yaml: their resolved config with a tiny schedule (under the test float order), and
a workflow copy that trains them on the session's tiny base model."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from tests.float_order import PERTURB
from tests.models import tiny_base_model
from tests.workflow import PACKAGE_LINKS, ROOT, copy_workflow
from trainer.contract.runid import parse_run_id
from trainer.sweep.config import load_yaml, resolve_run_config

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


def tiny_run_config(run: str, training: dict[str, Any] | None = None, **launcher: Any) -> dict[str, Any]:
    """The resolved config of `run` from config.yaml with a tiny schedule (TINY_RUN, then `training`)."""
    rc = resolve_run_config(load_yaml(ROOT / "config.yaml"), parse_run_id(run))
    rc["training"].update({**TINY_RUN, **(training or {})})
    rc["launcher"].update(launcher)
    if PERTURB["micro_batch_tokens"]:
        rc["training"]["micro_batch_tokens"] = PERTURB["micro_batch_tokens"]
    rc["resources"]["cpus"] = PERTURB["threads"]  # the trainer's torch threads
    return rc


def workflow_copy(d: Path, tmp_path_factory, links: tuple[str, ...] = PACKAGE_LINKS) -> Path:
    """copy_workflow(d) with the session's tiny base model in place of the tiny scale's, so Snakemake
    trains without rebuilding it."""
    copy_workflow(d, links)
    model_json = d / "results" / "models" / "tiny" / "model.json"
    model_json.parent.mkdir(parents=True)
    shutil.copy(tiny_base_model(tmp_path_factory), model_json)
    return d
