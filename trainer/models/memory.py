"""Peak memory of the three large moments of a step, as the chunk budget and the plan predict them.

- A rollout chunk (`rollout_chunk_bytes`): Hugging Face `generate` over rows left-padded to one width holds
  their KV cache (layers x KV heads x head dim x K and V x dtype bytes per token) plus, per decode step,
  each row's last-position logits in float32 and the sampling's copies of them (GENERATE_LOGITS_COPIES).
- The prompt prefill (`prefill_bytes`): the distinct prompts' KV cache, the last position's logits, and
  one layer's transient activations over every prompt token (PREFILL_ACTIVATION_WIDTHS x hidden floats).
- An update micro-batch (`update_bytes`): the completion positions' logits in float32 and their
  log-softmax and gradient (UPDATE_LOGITS_COPIES), the layer inputs that gradient checkpointing keeps
  (one hidden vector per token and layer), and one layer recomputed for its backward
  (UPDATE_LAYER_WIDTHS x hidden floats per token); without checkpointing every layer's activations.

Weights and optimizer state are left out: they are resident before the moment starts. The constants
were measured at Qwen3-0.6B's real width on CPU (benchmarks/bench_memory_model.py, docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Any

FLOAT32 = 4
GENERATE_LOGITS_COPIES = 4  # logits, processed scores, probabilities, and the top-p sort of a decode step
PREFILL_ACTIVATION_WIDTHS = 6  # a layer's q, k, v, attention output and the MLP's gate, up (x intermediate/hidden)
UPDATE_LOGITS_COPIES = 3  # logits, log-softmax, and their gradient
UPDATE_LAYER_WIDTHS = 16  # a recomputed layer's saved activations in hidden-size floats per token


def _get(shape: Any, key: str, default: Any = None) -> Any:
    """A shape field from a config.json dict or a transformers config object."""
    return shape.get(key, default) if isinstance(shape, dict) else getattr(shape, key, default)


def kv_bytes_per_token(shape: Any, dtype_bytes: int) -> int:
    """Bytes of KV cache one token holds: layers x KV heads x head dim x (K and V) x dtype bytes."""
    heads = _get(shape, "num_attention_heads")
    head_dim = _get(shape, "head_dim") or _get(shape, "hidden_size") // heads
    kv_heads = _get(shape, "num_key_value_heads") or heads
    return _get(shape, "num_hidden_layers") * kv_heads * head_dim * 2 * dtype_bytes


def generation_row_bytes(shape: Any) -> int:
    """Bytes one row of a generate chunk holds besides its KV cache: its decode step's logits and copies."""
    return GENERATE_LOGITS_COPIES * _get(shape, "vocab_size") * FLOAT32


def rollout_chunk_bytes(shape: Any, dtype_bytes: int, rows: int, width: int) -> int:
    """Peak bytes of one generate chunk of `rows` rows, prompt plus new tokens `width` long."""
    return rows * (width * kv_bytes_per_token(shape, dtype_bytes) + generation_row_bytes(shape))


def prefill_bytes(shape: Any, dtype_bytes: int, distinct: int, rows: int, prompt_len: int) -> int:
    """Peak bytes of prefilling `distinct` prompts `prompt_len` tokens long and indexing their KV cache to
    `rows` rows (trainer.rl.rollout.shared_prompt_cache; logits of the last position only)."""
    tokens = distinct * prompt_len
    hidden, inter = _get(shape, "hidden_size"), _get(shape, "intermediate_size")
    activations = tokens * dtype_bytes * (PREFILL_ACTIVATION_WIDTHS * hidden + 2 * inter)
    kv = kv_bytes_per_token(shape, dtype_bytes) * prompt_len
    return max(distinct * kv + activations, rows * kv) + distinct * _get(shape, "vocab_size") * FLOAT32


def update_bytes(
    shape: Any,
    dtype_bytes: int,
    rows: int,
    width: int,
    completion: int,
    checkpointing: bool = True,
    trained_params: int = 0,
) -> int:
    """Peak bytes of one update micro-batch's forward and backward: `rows` rows `width` tokens long, of
    which `completion` positions (per row) get logits; the gradients of `trained_params` float32 parameters."""
    tokens = rows * width
    hidden, layers = _get(shape, "hidden_size"), _get(shape, "num_hidden_layers")
    logits = UPDATE_LOGITS_COPIES * rows * completion * _get(shape, "vocab_size") * FLOAT32
    layer = tokens * dtype_bytes * (UPDATE_LAYER_WIDTHS * hidden + 3 * _get(shape, "intermediate_size"))
    kept = tokens * hidden * dtype_bytes * layers if checkpointing else layer * layers
    return logits + kept + (layer if checkpointing else 0) + trained_params * FLOAT32


def run_update_bytes(training: dict[str, Any], shape: Any, dtype_bytes: int, trained_params: int) -> int:
    """A run's update micro-batch peak as the plan predicts it: rows of max_completion_length completion tokens
    (prompts left out) packed to training.micro_batch_tokens, under its gradient checkpointing setting."""
    width = training["max_completion_length"]
    rows = max(1, training["micro_batch_tokens"] // width)
    return update_bytes(shape, dtype_bytes, rows, width, width, training["gradient_checkpointing"], trained_params)
