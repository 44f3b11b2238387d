"""The run config's part of the contract: what a run's hash covers, and whether a checkpoint may resume.

A run's config.json (written by the launcher) carries `config_hash`, a content hash of its hashed view:
the sections that decide what a run computes. Two run configs with the same hash compute the same run,
so a checkpoint resumes only under its own hash. `ConfigError` is the error of a config that cannot run.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from trainer.contract import rundir

# Sections that decide what a run computes; launcher and resources only decide where it runs,
# so changing them must not invalidate a run's checkpoints.
HASHED_KEYS = (
    "run",
    "workflow",
    "task",
    "scale",
    "policy",
    "seed",
    "model",
    "workflow_params",
    "task_params",
    "training",
    "base_model",
)


UNHASHED_BASE_MODEL_KEYS = ("build_time_s",)  # model.json facts that differ between identical builds

# Training settings added after runs were made, each with the value that reproduces what runs did before
# it existed (as config.json holds it: a nested setting as a dict). At that value a key is left out of the
# hash, so finished runs keep their hash and are not rerun. Part of the contract, so written here: the
# typed settings' defaults are checked against these values (tests/test_config.py).
HASHED_WHEN_SET: dict[str, Any] = {
    "agent_gradients": False,
    "early_warning": {
        "window": 3,
        "baseline_steps": 3,
        "entropy_ratio": 0.3,
        "zero_var_group_share": 0.9,
        "grad_spike_ratio": 5.0,
        "capture_share": 0.6,
        "amplification_index": 2.0,
        "train_inference_mismatch": 0.5,
    },
    "eval_chunk_problems": 256,
    "eval_samples": 1,
    "generation_memory_gb": None,
    "on_warning": "log",
    "vllm": {
        "gpu_memory_utilization": 0.3,
        "max_model_len": None,
        "enforce_eager": False,
        "enable_sleep_mode": False,
        "tensor_parallel_size": 1,
        "max_lora_rank": None,
    },
    "vllm_importance_sampling_correction": False,
    "vllm_importance_sampling_mode": "sequence_mask",
    "vllm_importance_sampling_clip_max": 3.0,
    "vllm_importance_sampling_clip_min": None,
}


class ConfigError(ValueError):
    """A config that cannot be run; the message names the key."""


def hashed_view(run_config: dict[str, Any]) -> dict[str, Any]:
    """The part of a run config that decides its results (not where it runs, nor how long a build took)."""
    view = {k: run_config.get(k) for k in HASHED_KEYS}
    if isinstance(view["base_model"], dict):
        view["base_model"] = {k: v for k, v in view["base_model"].items() if k not in UNHASHED_BASE_MODEL_KEYS}
    if isinstance(view["training"], dict):
        view["training"] = {
            k: v for k, v in view["training"].items() if not (k in HASHED_WHEN_SET and v == HASHED_WHEN_SET[k])
        }
    return view


def config_hash(run_config: dict[str, Any]) -> str:
    """A content hash of the run config's hashed view."""
    blob = json.dumps(hashed_view(run_config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def changed_keys(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Dotted keys of the hashed view whose values differ between two run configs."""

    def diff(a: Any, b: Any, path: str) -> list[str]:
        if isinstance(a, dict) and isinstance(b, dict):
            return [k for key in sorted(set(a) | set(b)) for k in diff(a.get(key), b.get(key), f"{path}{key}.")]
        return [path.rstrip(".")] if a != b else []

    return diff(hashed_view(old), hashed_view(new), "")


def checkpoint_config(work: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint under work/ and the run config it was written under, if any. One whose
    config.json a crash left unreadable is passed over: the trainer moves it aside when it resumes."""
    for ckpt in reversed(rundir.checkpoints(work)):
        try:
            return ckpt, json.loads((ckpt / rundir.CONFIG_JSON).read_text())
        except (OSError, ValueError):
            continue  # damaged (trainer/rl/checkpoint_files.py): not the one a resume would use
    return None


def resume_conflict(cfg: dict[str, Any], work: Path) -> str | None:
    """Why the run cannot resume under `cfg` (its newest checkpoint has another config hash), or None.

    The one check, for the launcher (before it submits) and the trainer (before it loads a checkpoint).
    """
    found = checkpoint_config(work)
    if found is None or found[1]["config_hash"] == cfg["config_hash"]:
        return None
    path, old = found
    keys = ", ".join(changed_keys(old, cfg)) or "(base model)"
    return (
        f"its checkpoint {path} was written under another config; changed: {keys}. Its logs up to that step "
        f"are kept there (train/eval/samples parquet)"
    )
