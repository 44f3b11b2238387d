"""Policies and the role -> policy routing table: Shared- and Isolated-Policy on one code path.

A policy is a LoRA adapter on one frozen base model (PEFT) or a full model copy, with its own
optimizer, learning-rate schedule and gradient clipping. `shared` routes every role to one
policy, `isolated` gives each role its own; any other grouping is a table too.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from peft import LoraConfig, PeftModel, get_peft_model

from trainer.settings import TrainingSettings


def routing_table(mode: str, roles: tuple[str, ...], groups: dict[str, list[str]] | None = None) -> dict[str, str]:
    """role -> policy name. `shared`: one policy; `isolated`: one per role; `groups`: as declared."""
    if groups:
        table = {role: name for name, members in groups.items() for role in members}
        missing = [r for r in roles if r not in table]
        if missing:
            raise ValueError(f"policy groups {groups} leave roles {missing} without a policy")
        return {r: table[r] for r in roles}
    if mode == "shared":
        return {r: "shared" for r in roles}
    if mode == "isolated":
        return {r: r for r in roles}
    raise ValueError(f"unknown policy mode {mode!r}: expected shared, isolated or explicit groups")


def lr_lambda(kind: str, max_steps: int, warmup_steps: int):
    """The multiplier of the learning rate at each optimizer step (TRL/transformers schedule names)."""

    def f(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        progress = (step - warmup_steps) / max(1, max_steps - warmup_steps)
        if kind == "constant":
            return 1.0
        if kind == "linear":
            return max(0.0, 1.0 - progress)
        if kind == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
        raise ValueError(f"unknown lr_scheduler_type {kind!r}")

    return f


@dataclass
class Policy:
    """One set of trainable parameters with its own optimizer and schedule."""

    name: str
    roles: list[str]
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR


class PolicySet:
    """All policies of a run over one base model, and which module to call for each."""

    def __init__(self, base: torch.nn.Module, routing: dict[str, str], training: TrainingSettings):
        self.routing = routing
        self.finetune = training.finetune
        names = list(dict.fromkeys(routing.values()))
        self.models: dict[str, torch.nn.Module] = {}
        if self.finetune == "lora":
            lora = training.lora
            cfg = LoraConfig(
                r=lora.r,
                lora_alpha=lora.lora_alpha,
                lora_dropout=lora.lora_dropout,
                target_modules=lora.target_modules,
                task_type="CAUSAL_LM",
            )
            self.peft: PeftModel = get_peft_model(base, cfg, adapter_name=names[0])
            for name in names[1:]:
                self.peft.add_adapter(name, cfg)
            params = {n: [p for k, p in self.peft.named_parameters() if f".{n}." in k and "lora_" in k] for n in names}
            for p in (p for ps in params.values() for p in ps):
                p.requires_grad_(True)  # PEFT freezes inactive adapters; model() re-selects the active one
            self.reference = None  # the base is the adapter-disabled model
        elif self.finetune == "full":
            self.reference = copy.deepcopy(base).requires_grad_(False) if training.beta > 0 else None
            for name in names:
                self.models[name] = copy.deepcopy(base).requires_grad_(True)
            params = {n: list(self.models[n].parameters()) for n in names}
        else:
            raise ValueError(f"training.finetune: unknown value {self.finetune!r} (lora or full)")
        steps = training.max_steps * training.num_iterations
        warmup = int(training.warmup_ratio * steps)
        self.policies: dict[str, Policy] = {}
        for name in names:
            if not params[name]:
                raise ValueError(f"policy {name!r} has no trainable parameters")
            opt = torch.optim.AdamW(
                params[name],
                lr=training.learning_rate,
                betas=(training.adam_beta1, training.adam_beta2),
                weight_decay=training.weight_decay,
            )
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(training.lr_scheduler_type, steps, warmup))
            self.policies[name] = Policy(name, [r for r, p in routing.items() if p == name], params[name], opt, sched)

    def model(self, policy: str) -> torch.nn.Module:
        """The module that computes `policy`: the PEFT model with that adapter active, or its copy."""
        if self.finetune == "lora":
            self.peft.set_adapter(policy)
            return self.peft
        return self.models[policy]

    def reference_logps_context(self, policy: str):
        """(module, context manager) computing the frozen reference: the base without adapters, or its copy."""
        if self.finetune == "lora":
            self.peft.set_adapter(policy)
            return self.peft, self.peft.disable_adapter()
        return self.reference, torch.no_grad()

    def __iter__(self) -> Iterator[Policy]:
        return iter(self.policies.values())

    def modules(self) -> list[torch.nn.Module]:
        """Every module holding trainable weights (for train/eval mode switches)."""
        return [self.peft] if self.finetune == "lora" else list(self.models.values())

    def save(self, directory: str) -> None:
        """Each policy with save_pretrained: one folder per policy (adapter or full model)."""
        for name in self.policies:
            if self.finetune == "lora":
                self.peft.save_pretrained(directory, selected_adapters=[name])
            else:
                self.models[name].save_pretrained(f"{directory}/{name}")
