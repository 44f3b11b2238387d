"""The real-scale path runs a training step, LoRA and full, shared and isolated, with gradient checkpointing.

A small random Qwen3ForCausalLM (2 layers, hidden 64) over the real Qwen3 tokenizer's full 151k
vocabulary is saved with save_pretrained to a local directory; scale qwen3-0.6b of config.yaml is
pointed at that directory (where Qwen/Qwen3-0.6B would be named), so the trainer loads it as a real
scale: AutoTokenizer/AutoModelForCausalLM.from_pretrained and `training.gradient_checkpointing`
(true in config.yaml). One step of a voting run (`Trainer.fit`, max_steps 1: eval, step, eval,
checkpoint, publish) must give a finite loss, change every policy's trainable parameters and (LoRA)
leave the frozen base bit-identical, run the decoder layers through the checkpointing function in
the backward pass, and save each policy in save_pretrained layout, loadable and equal to what was
trained. A random model never answers correctly, so the task's scores are replaced by seeded random
rewards: GRPO advantages are then non-zero and the step has a gradient.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pandas as pd
import pytest
import torch
import transformers
from safetensors.torch import load_file

from tests.local_qwen3 import real_scale_config, save_random_qwen3
from trainer.rl.train import Trainer
from trainer.tasks.base import Score

LAYERS = 2


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_random_qwen3(
        tmp_path_factory.mktemp("qwen3-random-full-vocab"), hidden_size=64, num_hidden_layers=LAYERS
    )


def random_scores(trainer: Trainer, seed: int = 0) -> None:
    rng = random.Random(seed)
    trainer.task.score_batch = lambda problems, texts: [Score(rng.random(), True, None) for _ in texts]
    assert trainer.workflow.task is trainer.task


def count_checkpointed_calls(trainer: Trainer) -> list[int]:
    """Wrap each decoder layer's checkpointing function (what HF calls in training when checkpointing is on)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    counter = [0]
    for module in trainer.policies.modules():
        for layer in module.modules():
            if isinstance(layer, GradientCheckpointingLayer):
                real = layer._gradient_checkpointing_func
                assert layer.gradient_checkpointing and real.keywords == {"use_reentrant": False}

                def wrapped(*args, _real=real, **kwargs):
                    counter[0] += 1
                    return _real(*args, **kwargs)

                layer._gradient_checkpointing_func = wrapped
    return counter


def hf_models(trainer: Trainer) -> dict[str, torch.nn.Module]:
    """policy -> the transformers model that computes it (LoRA: the one base, under the PEFT wrapper)."""
    p = trainer.policies
    return {name: p.peft.get_base_model() for name in p.policies} if p.finetune == "lora" else dict(p.models)


def assert_saved_as_trained(trainer: Trainer, saved: Path, model_dir: Path) -> None:
    """Each policy saved in save_pretrained layout under `saved`, and what was saved is what was trained."""
    policies = trainer.policies
    for name in policies.policies:
        folder = saved / name
        if policies.finetune == "lora":
            from peft import get_peft_model_state_dict

            assert (folder / "adapter_config.json").exists() and (folder / "adapter_model.safetensors").exists()
            adapter = json.loads((folder / "adapter_config.json").read_text())
            assert adapter["base_model_name_or_path"] == str(model_dir) and adapter["peft_type"] == "LORA"
            weights = load_file(folder / "adapter_model.safetensors")
            trained = get_peft_model_state_dict(policies.peft, adapter_name=name)
            assert weights.keys() == trained.keys() and weights
            assert all(torch.equal(weights[k], trained[k].cpu()) for k in weights)
        else:
            assert (folder / "config.json").exists() and (folder / "model.safetensors").exists()
            reloaded = transformers.AutoModelForCausalLM.from_pretrained(folder)
            trained = dict(policies.models[name].named_parameters())
            for n, x in reloaded.named_parameters():
                assert torch.equal(x, trained[n].detach().cpu()), n


@pytest.mark.parametrize("mode", ["shared", "isolated"])
@pytest.mark.parametrize("finetune", ["lora", "full"])
def test_real_scale_step_with_gradient_checkpointing(finetune, mode, model_dir, tmp_path):
    run_dir = tmp_path / "run"
    cfg = real_scale_config(
        model_dir,
        f"voting-math-qwen3-0.6b-{mode}-s0",
        run_dir,
        training={
            "finetune": finetune,
            "gradient_checkpointing": True,
            "micro_batch_tokens": 256,
            "learning_rate": 1e-3,
        },
        workflow_params={"n_votes": 2},
    )
    assert cfg["base_model"]["path"] == str(model_dir) and cfg["training"]["gradient_checkpointing"] is True
    trainer = Trainer(cfg, run_dir)
    assert len(trainer.tokenizer) == 151669  # the full Qwen3 vocabulary, loaded from the local directory
    policies = trainer.policies
    assert set(policies.policies) == ({"shared"} if mode == "shared" else {"generator", "aggregator"})
    for model in hf_models(trainer).values():
        assert isinstance(model, transformers.Qwen3ForCausalLM)
        assert model.is_activation_checkpointing
    checkpointed = count_checkpointed_calls(trainer)
    random_scores(trainer)

    before = {p.name: [x.detach().clone() for x in p.params] for p in policies}
    frozen = (
        {n: x.detach().clone() for n, x in policies.peft.named_parameters() if "lora_" not in n}
        if finetune == "lora"
        else {}
    )
    done = trainer.fit()
    assert done["steps_done"] == 1

    # the step: a finite loss, a gradient, no skipped update; the backward went through checkpointing
    train = pd.read_parquet(run_dir / "train.parquet")
    assert set(train["role"]) == {"generator", "aggregator"}
    assert train["loss"].map(math.isfinite).all() and (train["grad_norm"] > 0).all() and not train["skipped"].any()
    assert checkpointed[0] > 0 and checkpointed[0] % LAYERS == 0
    # every policy's trainable parameters moved; the frozen base did not
    for p in policies:
        assert not all(torch.equal(a, b) for a, b in zip(before[p.name], p.params)), f"policy {p.name} unchanged"
    if finetune == "lora":
        after = dict(policies.peft.named_parameters())
        assert all(torch.equal(x, after[n]) for n, x in frozen.items())
        assert all(not after[n].requires_grad for n in frozen)

    assert_saved_as_trained(trainer, run_dir / "work" / "checkpoints" / "step-000001" / "policies", model_dir)
