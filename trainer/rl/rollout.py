"""Rollout generation: one batched `generate` call per workflow stage and policy.

The `GenerationBackend` interface is what workflows call (through `__call__(role, prompts)`);
Hugging Face `generate` (left padding, KV cache) is the default backend. `training.generation_backend`
picks one (`make_generator`): `hf`, or `vllm` (trainer.rl.vllm_engine, the `vllm` extra).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import torch

from trainer.contract.config import ConfigError
from trainer.models import memory
from trainer.models.chat import chat_prompt, stop_token_ids
from trainer.rl.policies import PolicySet
from trainer.settings import TrainingSettings
from trainer.workflows import Completion


class GenerationBackend(Protocol):
    """Generates one completion per prompt for a role, with that role's policy."""

    calls: int
    chunks: int
    generated_tokens: int

    def __call__(self, role: str, prompts: list[str]) -> list[Completion]: ...

    def before_update(self) -> None:
        """Called after the step's rollouts, before the optimizer steps (vllm: the engine may sleep)."""

    def after_update(self, step: int) -> None:
        """Called after every optimizer step: bring the updated weights to the engine (and verify them)."""

    def close(self) -> None:
        """Called once training ends or fails: release what the backend holds outside the process (files)."""


# training.generation_memory_gb: null -> these defaults (GiB of KV cache one generate call may hold)
CUDA_FREE_FRACTION = 0.5  # of the device's free memory at the call: the rest for activations, logits, the update
CPU_DEFAULT_GB = 2.0  # fixed on CPU: a developer's machine is shared, its free memory says little


def kv_bytes_per_token(config: Any, dtype_bytes: int) -> int:
    """Bytes of KV cache one token holds (trainer.models.memory, the plan's model too)."""
    return memory.kv_bytes_per_token(config, dtype_bytes)


def generation_budget_bytes(memory_gb: float | None, device: str | torch.device) -> int:
    """The KV-cache budget of one generate call: `memory_gb` GiB, or the device's default."""
    if memory_gb is not None:
        return int(memory_gb * 2**30)
    if torch.device(device).type == "cuda":
        return int(CUDA_FREE_FRACTION * cuda_free_bytes(torch.device(device)))
    return int(CPU_DEFAULT_GB * 2**30)


def cuda_free_bytes(device: torch.device) -> int:
    """What this process can still allocate on `device`: the driver's free memory plus what PyTorch's
    caching allocator holds reserved but unallocated (after the update, the cache keeps its
    activations' blocks: `mem_get_info` counts them as used, yet `generate` reuses them)."""
    free = torch.cuda.mem_get_info(device)[0]
    return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))


def plan_chunks(
    lengths: list[int], max_new_tokens: int, bytes_per_token: int, budget: int, row_bytes: int = 0
) -> list[list[int]]:
    """Row indices grouped into chunks, shortest prompts first, each chunk's peak within `budget`.

    A left-padded chunk of rows holds rows x (its longest prompt + max_new_tokens) tokens of cache, and
    each row `row_bytes` more (its decode step's logits): trainer.models.memory.rollout_chunk_bytes.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])  # stable: ties keep input order
    chunks: list[list[int]] = []
    for i in order:
        width = lengths[i] + max_new_tokens  # the longest so far: sorted ascending
        per_row = width * bytes_per_token + row_bytes
        if per_row > budget:
            raise ConfigError(
                f"training.generation_memory_gb: one sequence of {width} tokens needs "
                f"{per_row / 2**30:.3f} GiB of KV cache and logits, over the budget of "
                f"{budget / 2**30:.3f} GiB: raise it or lower max_completion_length"
            )
        if chunks and (len(chunks[-1]) + 1) * per_row <= budget:
            chunks[-1].append(i)
        else:
            chunks.append([i])
    # rows in input order within a chunk: a stage that fits in one chunk is the unchunked call itself
    # (the same rows in the same order draw the same samples as one `generate` over them all)
    return [sorted(c) for c in chunks]


def shared_prompt_cache(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
    """The KV cache of each row's prompt but its last token, computed once per distinct prompt; None
    when no prompt repeats.

    A stage's rows repeat each prompt num_generations times (a voter's, n_votes times as often): the
    prefill is most of a small model's generation cost. `generate` given this cache runs only the
    prompts' last token before sampling. Positions as `generate` derives them from the mask.
    """
    rows = [tuple(r) for r in input_ids.tolist()]
    first: dict[tuple[int, ...], int] = {}
    for i, r in enumerate(rows):
        first.setdefault(r, i)
    if len(first) == len(rows) or input_ids.shape[1] < 2:
        return None
    distinct = list(first.values())
    ids, mask = input_ids[distinct, :-1], attention_mask[distinct, :-1]
    positions = (mask.long().cumsum(-1) - 1).masked_fill_(mask == 0, 1)
    # logits of the last position only (the cache is what is wanted): not prompt length x vocabulary
    cache = model(
        input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1
    ).past_key_values
    slot = {r: k for k, r in enumerate(first)}
    cache.reorder_cache(torch.tensor([slot[r] for r in rows], device=input_ids.device))  # one row per prompt row
    return cache


class HFGenerator:
    """Hugging Face `generate` over the policy that the role routes to.

    One call (one stage x policy, counted in `calls`) is split into chunks whose KV cache fits
    `generation_memory_gb` (counted in `chunks`); results come back in input order.
    """

    def __init__(
        self,
        policies: PolicySet,
        tokenizer: Any,
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float = 1.0,
        enable_thinking: bool = False,
        device: str | torch.device = "cpu",
        generation_memory_gb: float | None = None,
    ):
        self.policies = policies
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.enable_thinking = enable_thinking
        self.device = device
        self.memory_gb = generation_memory_gb
        self.calls = 0
        self.chunks = 0
        self.generated_tokens = 0
        self.stop_ids = stop_token_ids(tokenizer, policies.model(next(iter(policies.policies))))

    @torch.no_grad()
    def __call__(self, role: str, prompts: list[str]) -> list[Completion]:
        if not prompts:
            return []
        self.calls += 1
        model = self.policies.model(self.policies.routing[role])
        texts = [chat_prompt(self.tokenizer, p, self.enable_thinking) for p in prompts]
        ids = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        per_token = kv_bytes_per_token(model.config, next(model.parameters()).element_size())
        budget = generation_budget_bytes(self.memory_gb, self.device)
        results: list[Completion | None] = [None] * len(prompts)
        for chunk in plan_chunks(
            [len(x) for x in ids], self.max_new_tokens, per_token, budget, memory.generation_row_bytes(model.config)
        ):
            self.chunks += 1
            for i, completion in zip(chunk, self._generate(model, [ids[i] for i in chunk])):
                results[i] = completion
        return results  # type: ignore[return-value]

    def before_update(self) -> None:
        """Nothing to free: this backend generates with the trainer's own modules."""

    def after_update(self, step: int) -> None:
        """Nothing to sync: this backend generates with the trainer's own modules."""

    def close(self) -> None:
        """Nothing held outside the process."""

    def _generate(self, model: Any, prompt_ids: list[list[int]]) -> list[Completion]:
        """One Hugging Face `generate` over already tokenized prompts (left padded)."""
        enc = self.tokenizer.pad({"input_ids": prompt_ids}, return_tensors="pt", padding_side="left").to(self.device)
        sampling = (
            {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p, "top_k": 0}
            if self.temperature > 0
            else {"do_sample": False}
        )
        out = model.generate(
            input_ids=enc["input_ids"],
            attention_mask=enc["attention_mask"],
            max_new_tokens=self.max_new_tokens,
            use_cache=True,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=list(self.stop_ids),
            past_key_values=shared_prompt_cache(model, enc["input_ids"], enc["attention_mask"]),
            **sampling,
        )
        prompt_len = enc["input_ids"].shape[1]
        results = []
        for prompt, gen in zip(prompt_ids, out[:, prompt_len:]):
            ids = gen.tolist()
            end = next((k for k, t in enumerate(ids) if t in self.stop_ids), None)
            if end is not None:  # keep the stop token: the policy is trained to stop
                ids = ids[: end + 1]
            self.generated_tokens += len(ids)
            results.append(
                Completion(
                    text=self.tokenizer.decode(ids, skip_special_tokens=True),
                    prompt_ids=list(prompt),
                    completion_ids=ids,
                )
            )
        return results


def _hf_generator(policies: PolicySet, tokenizer: Any, training: TrainingSettings, **kwargs: Any) -> GenerationBackend:
    """Hugging Face generate (HFGenerator); the engine's arguments (seed, ranks, revision) are the vllm backend's."""
    for key in ("seed", "ranks", "revision"):
        kwargs.pop(key)
    return HFGenerator(policies, tokenizer, **kwargs)


def _vllm_generator(
    policies: PolicySet,
    tokenizer: Any,
    training: TrainingSettings,
    *,
    seed: int,
    ranks: Any = None,
    revision: str | None = None,
    **kwargs: Any,
) -> GenerationBackend:
    """The colocated vLLM engine's generator (trainer.rl.vllm_engine; preflight checked that vllm imports)."""
    from trainer.rl.vllm_engine import VLLMGenerator

    model = policies.model(next(iter(policies.policies)))
    # null max_model_len: room for prompts that quote several completions (an aggregator's), within the model's
    max_len = min(8 * kwargs["max_new_tokens"] + 1024, model.config.max_position_embeddings)
    return VLLMGenerator(
        policies,
        tokenizer,
        training=dataclasses.asdict(training),  # the engine's helpers (trainer/rl/preflight.py) read a dict
        seed=seed,
        max_model_len=max_len,
        ranks=ranks,
        revision=revision,
        **kwargs,
    )


# one builder per value trainer.settings.GENERATION_BACKENDS allows (tests/test_config_schema.py checks)
BUILDERS = {"hf": _hf_generator, "vllm": _vllm_generator}


def make_generator(
    training: TrainingSettings,
    policies: PolicySet,
    tokenizer: Any,
    *,
    temperature: float,
    device: str | torch.device = "cpu",
    seed: int = 0,
    ranks: Any = None,
    revision: str | None = None,
) -> GenerationBackend:
    """The rollout backend `training.generation_backend` names, sampling at `temperature` (training's or
    eval's) with training's lengths and nucleus; the vllm backend also takes the run's `seed`, this
    process's `ranks` (distributed.Ranks: one engine per rank) and the base model's pinned `revision`."""
    return BUILDERS[training.generation_backend](
        policies,
        tokenizer,
        training,
        max_new_tokens=training.max_completion_length,
        temperature=temperature,
        top_p=training.top_p,
        enable_thinking=training.enable_thinking,
        device=device,
        generation_memory_gb=training.generation_memory_gb,
        seed=seed,
        ranks=ranks,
        revision=revision,
    )
