"""A model's size before it loads: its parameters, a LoRA adapter's, and one checkpoint's bytes.

A checkpoint holds, per policy, the trained parameters (the LoRA adapter, or the whole model under
`finetune: full`) in float32 twice (the policy's save_pretrained files, and state.pt's copy, which a
resume loads bit for bit) and AdamW's two float32 moments of each. The trainer checks the free disk
against it before it writes one (trainer/rl/checkpoint_files.py); the plan and its gate read it too.
"""

from __future__ import annotations

from typing import Any

from trainer.workflows import workflow_class

PARAM_BYTES = 4  # trained parameters in float32 (the policy's files; the peak keeps only these)
STATE_BYTES = 4 + 8  # state.pt: the parameters again, and AdamW's exp_avg and exp_avg_sq, float32 each
# a Qwen3-style layer's linear maps (in, out) in units of hidden, heads x head_dim, KV heads x head_dim, MLP size
LINEAR_MAPS = (("h", "q"), ("h", "kv"), ("h", "kv"), ("q", "h"), ("h", "i"), ("h", "i"), ("i", "h"))
# the published config.json shapes of the study's models (the plan needs their size without the hub)
STUDY_MODELS = {
    "Qwen/Qwen3-0.6B": {
        "vocab_size": 151936,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
    },
    "Qwen/Qwen3-1.7B": {
        "vocab_size": 151936,
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
    },
    "Qwen/Qwen3-4B": {
        "vocab_size": 151936,
        "hidden_size": 2560,
        "intermediate_size": 9728,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
    },
}


def parameter_count(shape: dict[str, Any]) -> int:
    """Parameters of a Qwen3-style decoder of this shape (tied embeddings; norms left out)."""
    h, heads = shape["hidden_size"], shape["num_attention_heads"]
    head_dim = shape.get("head_dim") or h // heads
    attention = 2 * h * heads * head_dim + 2 * h * shape["num_key_value_heads"] * head_dim
    return shape["vocab_size"] * h + shape["num_hidden_layers"] * (attention + 3 * h * shape["intermediate_size"])


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
