"""The chat template of every rollout backend: one user message, ready for the assistant's turn."""

from __future__ import annotations

from typing import Any


def chat_prompt(tokenizer: Any, user_message: str, enable_thinking: bool) -> str:
    """The user message rendered with the model's chat template, ready for the assistant's turn."""
    return tokenizer.apply_chat_template([{"role": "user", "content": user_message}], tokenize=False,
                                         add_generation_prompt=True, enable_thinking=enable_thinking)
