"""The tiny base model's warm-start data: the imperfect teacher's share of flawed solutions, and the
check that demonstrations fit the completions a run may generate."""

from __future__ import annotations

import dataclasses
import random

import pytest

from tests.workflow import ROOT
from trainer.models.base_model import build_tokenizer, check_completion_lengths, demonstrations, warm_start_lr_factor
from trainer.settings import TinySettings
from trainer.sweep.config import base_model_spec, load_yaml

TINY_DEFAULTS = dataclasses.asdict(TinySettings())


def code_spec(flaw_rate: float) -> dict:
    spec = base_model_spec(load_yaml(ROOT / "config.yaml"), "tiny", ["code"])
    spec["tiny"]["flawed_demonstrations"] = flaw_rate
    return spec


def solutions(pairs: list[tuple[str, str]]) -> list[str]:
    return [c for _, c in pairs if c.startswith("```python")]


@pytest.mark.parametrize("rate", [0.0, 0.5])
def test_a_share_of_the_solutions_carries_the_flaw(rate):
    pairs = demonstrations(code_spec(rate), random.Random(0))["code"]
    sols = solutions(pairs)
    printed = sum("print(" in c for c in sols) / len(sols)
    assert abs(printed - rate) < 0.05, f"share of flawed solutions {printed:.3f}, flawed_demonstrations {rate}"
    assert all(("print(" in c) != ("return " in c) for c in sols)  # each solution either prints or returns


def test_flawed_solutions_are_judged_incorrect_and_passed_over():
    pairs = demonstrations(code_spec(0.5), random.Random(0))["code"]
    judged = [(u, c) for u, c in pairs if "Is the solution correct?" in u]
    assert any("print(" in u and "Incorrect" in c for u, c in judged)
    assert not any("print(" in u.split("Solution: ")[1] and c == "\\boxed{Correct}" for u, c in judged)


def test_demonstrations_longer_than_the_completion_limit_are_refused():
    pairs = {"math": [("Calculate 47 + 35.", "7+5=12, 4+3=7, 7+1=8. 47 + 35 = \\boxed{82}")]}
    tokenizer = build_tokenizer([text for pair in pairs["math"] for text in pair] * 20, 300)
    n = len(tokenizer(pairs["math"][0][1], add_special_tokens=False)["input_ids"]) + 1  # with eos
    spec = {"tasks": {"math": {"task_params": {"max_completion_length": n}}}}
    check_completion_lengths(spec, pairs, tokenizer)  # fits exactly
    spec["tasks"]["math"]["task_params"]["max_completion_length"] = n - 1
    with pytest.raises(ValueError, match=r"tasks\.math\.max_completion_length \(\d+\) is shorter"):
        check_completion_lengths(spec, pairs, tokenizer)


def test_the_demo_demonstrations_fit_the_demo_completion_lengths():
    config = load_yaml(ROOT / "config.yaml")
    spec = base_model_spec(config, "tiny", ["math", "code"])
    by_task = demonstrations(spec, random.Random(0))
    tokenizer = build_tokenizer(
        [t for pairs in by_task.values() for pair in pairs for t in pair], spec["tiny"]["vocab_size"]
    )
    check_completion_lengths(spec, by_task, tokenizer)


def test_warm_start_rate_warms_up_holds_then_decays_to_a_tenth():
    factors = [warm_start_lr_factor(s, warmup=10, decay_start=60, decay_steps=30) for s in range(100)]
    assert factors[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert factors[10:60] == [1.0] * 50
    assert all(a > b for a, b in zip(factors[60:90], factors[61:91]))
    assert factors[90:] == pytest.approx([0.1] * 10)


def tiny_model_and_pair():
    """A one-layer model and one (prompt, completion) pair: every batch row is that pair."""
    from trainer.models.base_model import build_tiny_model

    user, completion = "Calculate 12 + 34.", "2+4=6, 1+3=4. 12 + 34 = \\boxed{46}"
    tokenizer = build_tokenizer([user, completion, "user\nassistant\n"], 300)
    arch = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
    }
    model = build_tiny_model(
        arch, 0, vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    return model, tokenizer, [(user, completion)]


@pytest.mark.parametrize("micro_batches", [1, 3])
def test_warm_start_loss_is_the_completion_mean_and_the_prompt_weight_adds_prompt_gradient(micro_batches):
    import torch

    from trainer.models.base_model import warm_start
    from trainer.models.chat import chat_prompt

    arch = {
        **TINY_DEFAULTS,
        "warm_start_steps": 1,
        "warm_start_batch_size": 4,
        "warm_start_micro_batches": micro_batches,
        "warm_start_learning_rate": 1e-2,
    }
    results = {}
    for prompt_weight in (0.0, 0.5):
        model, tokenizer, pairs = tiny_model_and_pair()
        prompt = tokenizer(chat_prompt(tokenizer, pairs[0][0], False), add_special_tokens=False)["input_ids"]
        completion = tokenizer(pairs[0][1], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        ids = torch.tensor([prompt + completion])
        with torch.no_grad():  # Hugging Face's causal-LM loss on the completion tokens, before the step
            expected = model(input_ids=ids, labels=torch.tensor([[-100] * len(prompt) + completion])).loss.item()
        stats = warm_start(
            model, tokenizer, pairs, {**arch, "warm_start_prompt_loss": prompt_weight}, 0, log=lambda msg: None
        )
        assert stats["final_loss"] == pytest.approx(expected, rel=1e-5)  # the logged loss: completion tokens only
        results[prompt_weight] = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert not torch.allclose(results[0.0], results[0.5]), "the prompt tokens' loss changed nothing"


def test_the_final_decay_starts_once_the_loss_is_below_the_threshold_else_over_the_last_quarter():
    from trainer.models.base_model import LOSS_WINDOW, warm_start

    arch = {
        **TINY_DEFAULTS,
        "warm_start_steps": 200,
        "warm_start_batch_size": 2,
        "warm_start_micro_batches": 1,
        "warm_start_warmup_steps": 5,
        "warm_start_decay_steps": 5,
        "warm_start_learning_rate": 1e-2,
    }
    lines = []
    model, tokenizer, pairs = tiny_model_and_pair()
    first = warm_start(model, tokenizer, pairs, {**arch, "warm_start_steps": 1}, 0, log=lambda m: None)["final_loss"]
    model, tokenizer, pairs = tiny_model_and_pair()
    stats = warm_start(model, tokenizer, pairs, {**arch, "warm_start_decay_below": first * 0.8}, 0, log=lines.append)
    assert LOSS_WINDOW <= stats["decay_start"] < 195, stats  # one example: its loss falls within the cap
    assert stats["steps"] == stats["decay_start"] + 5 and stats["final_loss"] < first * 0.8
    assert any("decaying over 5 steps" in line for line in lines)
    model, tokenizer, pairs = tiny_model_and_pair()
    stats = warm_start(model, tokenizer, pairs, {**arch, "warm_start_decay_below": None}, 0, log=lambda m: None)
    assert (stats["steps"], stats["decay_start"]) == (200, 150)
