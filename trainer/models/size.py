"""What a run writes to disk, before it runs: one checkpoint, the most its checkpoints hold at once, its logs.

A checkpoint holds, per policy, the trained parameters (the LoRA adapter, or the whole model under
`finetune: full`) in float32 twice (the policy's save_pretrained files, and state.pt's copy, which a
resume loads bit for bit) and AdamW's two float32 moments of each. A run keeps `keep_last`
checkpoints, writes the next one before it removes the oldest, and keeps the peak's policies beside
them (no optimizer state): its peak disk use. Logs: the samples kept per eval (their text, ~4 bytes a
token) and a few KiB of metrics per step and role.
"""

from __future__ import annotations

import math
from typing import Any

from trainer.sweep.cost import STUDY_MODELS, eval_count, parameter_count
from trainer.workflows import workflow_class

PARAM_BYTES = 4  # trained parameters in float32 (the policy's files; the peak keeps only these)
STATE_BYTES = 4 + 8  # state.pt: the parameters again, and AdamW's exp_avg and exp_avg_sq, float32 each
TEXT_BYTES_PER_TOKEN = 4
METRIC_BYTES_PER_STEP_ROLE = 4096
# a Qwen3-style layer's linear maps (in, out) in units of hidden, heads x head_dim, KV heads x head_dim, MLP size
LINEAR_MAPS = (("h", "q"), ("h", "kv"), ("h", "kv"), ("q", "h"), ("h", "i"), ("h", "i"), ("i", "h"))


def model_shape(scale: dict[str, Any]) -> dict[str, Any] | None:
    """A scale's config.json shape: the tiny spec's, the study models' published ones, or None."""
    if scale["model"] == "tiny":
        tiny = scale["tiny"]
        return {**tiny, "num_key_value_heads": tiny.get("num_key_value_heads", tiny["num_attention_heads"])}
    return STUDY_MODELS.get(scale["model"])


def lora_parameters(shape: dict[str, Any], rank: int) -> int:
    """Parameters of a rank-`rank` LoRA adapter on every linear map of every layer (target_modules: all-linear)."""
    heads = shape["num_attention_heads"]
    head_dim = shape.get("head_dim") or shape["hidden_size"] // heads
    size = {
        "h": shape["hidden_size"],
        "q": heads * head_dim,
        "i": shape["intermediate_size"],
        "kv": (shape.get("num_key_value_heads") or heads) * head_dim,
    }
    return shape["num_hidden_layers"] * sum(rank * (size[a] + size[b]) for a, b in LINEAR_MAPS)


def policy_count(run_config: dict[str, Any]) -> int:
    """Policies a run trains: its declared groups, one (shared), or one per role of its workflow (isolated)."""
    groups = run_config["training"].get("policy_groups")
    if groups:
        return len(groups)
    if run_config["policy"] == "shared":
        return 1
    return len(workflow_class(run_config["workflow"], run_config["workflow_params"]).roles)


def trained_parameters(run_config: dict[str, Any], shape: dict[str, Any]) -> int:
    """One policy's trained parameters: the adapter's under LoRA, the model's under full fine-tuning."""
    t = run_config["training"]
    return lora_parameters(shape, t["lora"]["r"]) if t["finetune"] == "lora" else parameter_count(shape)


def checkpoint_bytes(run_config: dict[str, Any], shape: dict[str, Any] | None = None) -> int:
    """Bytes of one checkpoint of the run: every policy's trained parameters, state.pt's copy and their AdamW state.

    `shape` defaults to the run's model's (`model` of a resolved run config: the tiny spec, or a study
    model's published shape); a ValueError names the run and the model when its shape is unknown."""
    shape = shape or _shape_of(run_config)
    return policy_count(run_config) * trained_parameters(run_config, shape) * (PARAM_BYTES + STATE_BYTES)


def _shape_of(run_config: dict[str, Any]) -> dict[str, Any]:
    """The shape of a resolved run config's model (its `model`: name, dtype and the tiny spec)."""
    spec = run_config.get("model") or {}
    shape = model_shape({**spec, "model": spec.get("name")}) if isinstance(spec, dict) else None
    if shape is None:
        raise ValueError(
            f"run {run_config.get('run')}: the size of model {spec!r} is unknown; pass its config.json shape"
        )
    return shape


def run_disk(run_config: dict[str, Any], scale: dict[str, Any]) -> dict[str, float]:
    """A run's checkpoint, peak-checkpoint-use and log bytes (NaN where the model's shape is unknown)."""
    shape = model_shape(scale)
    t = run_config["training"]
    if shape is None:
        return {"checkpoint_gb": math.nan, "disk_peak_gb": math.nan, "log_gb": math.nan}
    one = checkpoint_bytes(run_config, shape)
    peak_policies = one * PARAM_BYTES / (PARAM_BYTES + STATE_BYTES)
    cls = workflow_class(run_config["workflow"], run_config["workflow_params"])
    turns = cls.max_turns(run_config["workflow_params"])
    samples = eval_count(t) * t["samples_per_eval"] * turns * t["max_completion_length"] * TEXT_BYTES_PER_TOKEN
    metrics = t["max_steps"] * len(cls.roles) * METRIC_BYTES_PER_STEP_ROLE
    return {
        "checkpoint_gb": one / 1e9,
        "disk_peak_gb": ((t["keep_last"] + 1) * one + peak_policies) / 1e9,
        "log_gb": (samples + metrics) / 1e9,
    }
