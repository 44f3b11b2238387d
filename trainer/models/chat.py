"""The chat template of every rollout backend: one user message, ready for the assistant's turn; and
the tokens at which every backend stops."""

from __future__ import annotations

from typing import Any

# the Qwen family's end of a chat turn and end of a document: a model ends its answer with either
# (vLLM stops at both, reading generation_config.json's eos_token_id; Hugging Face `generate` given one
# eos id stops at that one only)
STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")


def chat_prompt(tokenizer: Any, user_message: str, enable_thinking: bool) -> str:
    """The user message rendered with the model's chat template, ready for the assistant's turn."""
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": user_message}],
        tokenize=False,
        add_generation_prompt=True,
        enable_thinking=enable_thinking,
    )


def stop_token_ids(tokenizer: Any, model: Any = None) -> tuple[int, ...]:
    """The token ids at which every rollout backend ends a completion (the token kept in its ids):
    the tokenizer's eos, the model's generation config's eos ids (what vLLM adds by itself) and
    STOP_TOKENS where the vocabulary has them; sorted. The HF backend passes them as `eos_token_id`,
    the vLLM backend as `stop_token_ids`, so both stop at the same set."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    ids.update(eos if isinstance(eos, (list, tuple)) else [] if eos is None else [eos])
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in STOP_TOKENS if t in vocab)
    return tuple(sorted(int(i) for i in ids))
