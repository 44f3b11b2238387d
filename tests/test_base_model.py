"""The tiny base model's warm-start data: the imperfect teacher's share of flawed solutions, and the
check that demonstrations fit the completions a run may generate."""

from __future__ import annotations

import random

import pytest

from tests.conftest import ROOT
from trainer.models.base_model import build_tokenizer, check_completion_lengths, demonstrations, warm_start_lr_factor
from trainer.sweep.config import base_model_spec, load_yaml


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
    tokenizer = build_tokenizer([t for pairs in by_task.values() for pair in pairs for t in pair],
                                spec["tiny"]["vocab_size"])
    check_completion_lengths(spec, by_task, tokenizer)


def test_warm_start_rate_is_constant_then_decays_over_the_last_quarter():
    factors = [warm_start_lr_factor(s, 100) for s in range(100)]
    assert factors[:75] == [1.0] * 75
    assert all(a > b for a, b in zip(factors[75:], factors[76:])) and factors[-1] == pytest.approx(0.136, abs=0.01)
