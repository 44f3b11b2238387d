"""Rollout generation: one batched `generate` call per workflow stage and policy.

The `GenerationBackend` interface is what workflows call (through `__call__(role, prompts)`);
Hugging Face `generate` (left padding, KV cache) is the default backend. `training.generation_backend`
picks one (`make_generator`): `hf`, or `vllm`, optional, for GPUs.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Protocol

import torch

from trainer.sweep.config import ConfigError
from trainer.rl.policies import PolicySet
from trainer.workflows import Completion


class GenerationBackend(Protocol):
    """Generates one completion per prompt for a role, with that role's policy."""

    calls: int

    def __call__(self, role: str, prompts: list[str]) -> list[Completion]: ...


def chat_prompt(tokenizer: Any, user_message: str, enable_thinking: bool) -> str:
    """The user message rendered with the model's chat template, ready for the assistant's turn."""
    return tokenizer.apply_chat_template([{"role": "user", "content": user_message}], tokenize=False,
                                         add_generation_prompt=True, enable_thinking=enable_thinking)


class HFGenerator:
    """Hugging Face `generate` over the policy that the role routes to."""

    def __init__(self, policies: PolicySet, tokenizer: Any, *, max_new_tokens: int, temperature: float,
                 top_p: float = 1.0, enable_thinking: bool = False, device: str | torch.device = "cpu"):
        self.policies = policies
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.enable_thinking = enable_thinking
        self.device = device
        self.calls = 0
        self.generated_tokens = 0

    @torch.no_grad()
    def __call__(self, role: str, prompts: list[str]) -> list[Completion]:
        if not prompts:
            return []
        self.calls += 1
        model = self.policies.model(self.policies.routing[role])
        texts = [chat_prompt(self.tokenizer, p, self.enable_thinking) for p in prompts]
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, padding_side="left",
                             add_special_tokens=False).to(self.device)
        sampling = {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p, "top_k": 0} \
            if self.temperature > 0 else {"do_sample": False}
        out = model.generate(**enc, max_new_tokens=self.max_new_tokens, use_cache=True,
                             pad_token_id=self.tokenizer.pad_token_id, eos_token_id=self.tokenizer.eos_token_id,
                             **sampling)
        prompt_len = enc["input_ids"].shape[1]
        results = []
        for row, mask, gen in zip(enc["input_ids"], enc["attention_mask"], out[:, prompt_len:]):
            ids = gen.tolist()
            if self.tokenizer.eos_token_id in ids:  # keep the eos: the policy is trained to stop
                ids = ids[:ids.index(self.tokenizer.eos_token_id) + 1]
            self.generated_tokens += len(ids)
            results.append(Completion(text=self.tokenizer.decode(ids, skip_special_tokens=True),
                                      prompt_ids=row[mask.bool()].tolist(), completion_ids=ids))
        return results


def _vllm_generator(policies: PolicySet, tokenizer: Any, **kwargs: Any) -> GenerationBackend:
    if importlib.util.find_spec("vllm") is None:
        raise ConfigError("training.generation_backend: 'vllm' needs the vllm package, which is not installed "
                          "here (pip install vllm, on a GPU machine), or set training.generation_backend: hf")
    raise ConfigError("training.generation_backend: 'vllm' is installed, but this trainer has no vLLM backend "
                      "yet (its adapters would have to be synchronised to the engine every step); use hf")


# training.generation_backend -> constructor (the config schema lists the same names)
_BACKENDS = {"hf": HFGenerator, "vllm": _vllm_generator}


def make_generator(backend: str, policies: PolicySet, tokenizer: Any, **kwargs: Any) -> GenerationBackend:
    """The rollout backend named by `training.generation_backend` (HFGenerator's arguments)."""
    if backend not in _BACKENDS:
        raise ConfigError(f"training.generation_backend: unknown backend {backend!r} (one of {', '.join(_BACKENDS)})")
    return _BACKENDS[backend](policies, tokenizer, **kwargs)
