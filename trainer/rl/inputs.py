"""What a run starts from, read from its settings: the base model and its tokenizer, and the train and eval
problems of its task's sources."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from trainer.settings import RunSettings, eval_problem_limit
from trainer.tasks import Problem, load_problems


def load_base(settings: RunSettings, device: str) -> tuple[Any, torch.nn.Module]:
    """The tokenizer and base model of settings.base_model at the pinned revision, on `device` (its dtype on
    a GPU, float32 on the CPU), with gradient checkpointing where training.gradient_checkpointing is set."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = settings.base_model["path"]
    dtype = getattr(torch, settings.model.dtype) if device.startswith("cuda") else torch.float32
    revision = settings.model.revision  # pinned by the prefetch rule (hub ids only)
    tokenizer = AutoTokenizer.from_pretrained(path, revision=revision)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, revision=revision).to(device)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if settings.training.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    return tokenizer, model


def load_train_problems(settings: RunSettings) -> list[Problem]:
    """The problems of the task's train source."""
    return load_problems(settings.task, _source_spec(settings.task_params.train), "train")


def load_eval_splits(settings: RunSettings) -> dict[str, list[Problem]]:
    """Each eval split's problems by name (eval0, eval1, ... where unnamed), at most its eval_problems, else
    training's; a split of the train source's holdout carries that source."""
    train = _source_spec(settings.task_params.train)
    splits = {}
    for i, source in enumerate(settings.task_params.eval):
        spec = _source_spec(source)
        if source.from_train_holdout:
            spec["train_spec"] = train
        limit = eval_problem_limit(source.eval_problems, settings.training.eval_problems)
        splits[source.name or f"eval{i}"] = load_problems(settings.task, spec, "eval")[:limit]
    return splits


def _source_spec(source: Any) -> dict[str, Any]:
    """A typed source as the dict trainer.tasks reads (its defaults are the typed ones)."""
    return dataclasses.asdict(source)
