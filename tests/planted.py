"""Planted base models: the shape of an accuracy curve made by construction, not by one CPU's floats.

`damaged_base_model` copies a base model and subtracts a large planted rank-r product, scaled as PEFT
scales a LoRA update, from every layer's `mlp.down_proj` weight. The copy writes garbage: every answer
is wrong, so its accuracy is 0 and every GRPO group has zero reward variance, on any CPU.

`plant(policies, factors, sign)` sets each adapter's LoRA factors on those modules to the planted ones:
sign +1 gives the original model back (up to float rounding), sign -1 doubles the damage.
`planted_peak(restored_until)` does that after each train step: restored at steps 1..restored_until,
damaged twice after, so the curve is 0 at step 0, the original model's accuracy up to `restored_until`,
and 0 after: a peak at step 1 (the first maximum of the smoothed curve) and a fall, by construction.
The training itself (rollouts, GRPO update, checkpoints, resume) runs for real in between.

`python -m tests.planted RUN_DIR RESTORED_UNTIL` trains a run in a subprocess under that schedule.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import torch

FACTORS = "planted_lora.pt"  # beside the damaged model's weights: {module name: (A, B)}
MODULE = "mlp.down_proj"
DAMAGE = 1.0  # std of the planted factors: the product is ~100x the tiny model's down_proj weights


def damaged_base_model(model_json: Path, out: Path, rank: int, lora_alpha: float, seed: int = 0) -> dict:
    """model.json of a damaged copy (in `out`) of the base model of `model_json`, its planted factors saved."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    info = json.loads(Path(model_json).read_text())
    model = AutoModelForCausalLM.from_pretrained(info["path"], dtype=torch.float32)
    gen = torch.Generator().manual_seed(seed)
    factors = {}
    with torch.no_grad():
        for name, module in model.named_modules():
            if name.endswith(MODULE):
                out_f, in_f = module.weight.shape
                a = torch.randn(rank, in_f, generator=gen) * DAMAGE
                b = torch.randn(out_f, rank, generator=gen) * DAMAGE
                module.weight -= (lora_alpha / rank) * (b @ a)
                factors[name] = (a, b)
    assert factors, f"{info['path']}: no {MODULE} module to damage"
    model_dir = Path(out) / "model"
    model.save_pretrained(model_dir)
    AutoTokenizer.from_pretrained(info["path"]).save_pretrained(model_dir)
    torch.save(factors, model_dir / FACTORS)
    damaged = {**info, "path": str(model_dir), "fingerprint": f"{info.get('fingerprint', '')}-damaged"}
    (Path(out) / "model.json").write_text(json.dumps(damaged))
    return damaged


def plant(peft_model: torch.nn.Module, factors: dict[str, tuple[torch.Tensor, torch.Tensor]], sign: float) -> None:
    """Every adapter's LoRA factors on the damaged modules set to the planted (A, sign * B)."""
    found = 0
    with torch.no_grad():
        for name, module in peft_model.named_modules():
            key = name.removeprefix("base_model.model.")
            if key in factors and hasattr(module, "lora_A"):
                a, b = factors[key]
                for adapter in module.lora_A:
                    module.lora_A[adapter].weight.copy_(a)
                    module.lora_B[adapter].weight.copy_(sign * b)
                    found += 1
    assert found, "no LoRA module of the planted ones: is the run's finetune lora, on all-linear?"


@contextlib.contextmanager
def planted_peak(restored_until: int) -> Iterator[None]:
    """While open, every Trainer's train step ends by planting: restored up to `restored_until`, damaged after."""
    from trainer.rl.train import Trainer

    real = Trainer.train_step

    def train_step(self: Trainer, step: int) -> None:
        real(self, step)
        factors = torch.load(Path(self.settings.base_model["path"]) / FACTORS)
        plant(self.policies.peft, factors, 1.0 if step <= restored_until else -1.0)

    Trainer.train_step = train_step
    try:
        yield
    finally:
        Trainer.train_step = real


if __name__ == "__main__":
    from trainer.rl.run import run_training

    with planted_peak(int(sys.argv[2])):
        run_training(sys.argv[1])
