"""Settings of a run's base model: a hub or local model, or the tiny model built offline (config.yaml's
`scales.<scale>`)."""

from __future__ import annotations

from dataclasses import dataclass

from trainer.settings.fields import setting

DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class TinySettings:
    """Architecture and warm start of the offline tiny model (model `tiny` only; trainer/models/base_model.py)."""

    vocab_size: int = setting(512, "Retrained tokenizer vocabulary.", ge=300)
    hidden_size: int = setting(128, "Hidden size.", ge=16)
    intermediate_size: int = setting(384, "MLP size.", ge=16)
    num_hidden_layers: int = setting(2, "Layers.", ge=1)
    num_attention_heads: int = setting(4, "Attention heads.", ge=1)
    num_key_value_heads: int = setting(2, "KV heads.", ge=1)
    warm_start_steps: int = setting(1100, "Supervised warm-start steps (at most, with warm_start_decay_below).", ge=0)
    warm_start_batch_size: int = setting(32, "Warm-start batch size.", ge=1)
    warm_start_learning_rate: float = setting(6.0e-3, "Warm-start learning rate.", gt=0)
    warm_start_decay_below: float | None = setting(
        0.12,
        "Start the final decay once the completion loss (mean of 20 steps) is below this; null: over the last quarter.",
        gt=0,
    )
    warm_start_decay_steps: int = setting(150, "Steps of the final decay (with warm_start_decay_below).", ge=1)
    warm_start_warmup_steps: int = setting(50, "Warm-start steps of linear learning-rate warm-up.", ge=0)
    warm_start_prompt_loss: float = setting(
        0.3, "Weight of the prompt tokens' loss beside the completion's (0: completion tokens only).", ge=0
    )
    warm_start_micro_batches: int = setting(
        4, "Length-sorted micro-batches per warm-start step (less padding, same gradient).", ge=1
    )
    flawed_demonstrations: float = setting(
        0.0,
        "Share of the warm start's solution demonstrations that carry the task's typical mistake (a dropped "
        "carry, print for return): the base model makes it, RL can learn not to.",
        ge=0,
        le=1,
    )
    seed: int = setting(0, "Seed of the build.")


@dataclass(frozen=True)
class ModelSettings:
    """The base model of a run: its scale's `model`, `dtype`, `revision` and `tiny`, and prefetch's content hash."""

    name: str = setting("tiny", "A Hugging Face id, a local path, or `tiny` (built offline).")
    dtype: str = setting("float32", "Parameter dtype of the base model on GPU (CPU runs use float32).", choices=DTYPES)
    tiny: TinySettings | None = setting(None, "Architecture and warm start of the tiny model (model `tiny` only).")
    revision: str | None = setting(
        None,
        "The hub commit of the model (a hub id; `python -m trainer pin` writes it); prefetch fails when the "
        "hub resolves another.",
        schema={"pattern": "^[0-9a-f]{40}$"},
    )
    content_hash: str | None = setting(None, "The content hash of a prefetched model's files (set by prefetch).")
