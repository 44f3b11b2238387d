"""Rollouts batch every stage into one Hugging Face `generate` call per policy the stage uses.

For each workflow and policy mode, one real rollout step (`Trainer.rollout`, through HFGenerator,
on a small random Qwen3 with the real Qwen3 tokenizer saved to a local directory and loaded as a
real scale) is run while the test counts calls of the real `generate` of the Hugging Face model
(`GenerationMixin.generate`, under PEFT's or the full copy's wrapper), which policy each call ran
and how many rows it held. Every stage of these workflows has one role, so routes to one policy in
either mode: the count is the number of stages (eval_opt: 2 per round), the same for n_votes 2 and
5, max_subtasks 1 and 3, and batches of 1x2 and 3x4 (prompts_per_step x num_generations).
"""

from __future__ import annotations

import importlib.util

import pytest
from transformers.generation.utils import GenerationMixin

from tests.local_qwen3 import real_scale_config, save_random_qwen3, small_vocab_tokenizer
from trainer.rl.train import Trainer

MAX_ITERATIONS = 2
# Completions of 3 tokens cannot hold a whole \boxed{Correct} (15 tokens in the small vocabulary), so every
# eval_opt verdict is unparseable, counts as Incorrect, and all MAX_ITERATIONS rounds run.
MAX_NEW_TOKENS = 3

# The stages of each workflow in order, each the roles it generates for (eval_opt: one round's).
STAGES = {
    "single": [("generator",)],
    "voting": [("generator",), ("aggregator",)],
    "eval_opt": [("generator",), ("evaluator",)],
    "orch_workers": [("orchestrator",), ("worker",), ("synthesizer",)],
}
ROUNDS = {"eval_opt": MAX_ITERATIONS}
# What the design promises: stages x policies used per stage (here always 1), whatever the batch.
EXPECTED_CALLS = {"single": 1, "voting": 2, "eval_opt": 2 * MAX_ITERATIONS, "orch_workers": 3}

KNOBS = {
    "single": [{}],
    "eval_opt": [{}],
    "voting": [{"n_votes": 2}, {"n_votes": 5}],
    "orch_workers": [{"max_subtasks": 1}, {"max_subtasks": 3}],
}
BATCHES = [(1, 2), (3, 4)]  # prompts_per_step x num_generations
CASES = [
    pytest.param(
        w,
        mode,
        knobs,
        batch,
        id=f"{w}-{mode}-{'-'.join(f'{k}{v}' for k, v in knobs.items()) or 'x'}-{batch[0]}x{batch[1]}",
    )
    for w in STAGES
    for mode in ("shared", "isolated")
    for knobs in KNOBS[w]
    for batch in BATCHES
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A random Qwen3 with the Qwen3 tokenizer retrained to 300 entries (as `tiny` does): generation cost is
    then the model's, not a 151k-way multinomial's (tests/test_real_scale.py uses the full vocabulary)."""
    return save_random_qwen3(tmp_path_factory.mktemp("qwen3-random"), small_vocab_tokenizer(), hidden_size=32)


class GenerateSpy:
    """Counts calls of Hugging Face `generate` (the outermost only), with the policy and rows of each."""

    def __init__(self, trainer: Trainer, monkeypatch: pytest.MonkeyPatch):
        self.trainer, self.calls, self.depth = trainer, [], 0
        policies = trainer.policies
        owner = {id(m): name for name, m in policies.models.items()}  # full: which copy generated
        real = GenerationMixin.generate

        def generate(model, *args, **kwargs):
            if self.depth:
                return real(model, *args, **kwargs)
            policy = policies.peft.active_adapter if policies.finetune == "lora" else owner[id(model)]
            self.calls.append((policy, int(kwargs["input_ids"].shape[0])))
            self.depth += 1
            try:
                return real(model, *args, **kwargs)
            finally:
                self.depth -= 1

        monkeypatch.setattr(GenerationMixin, "generate", generate)


def expected_calls(workflow: str, routing: dict[str, str], episodes) -> list[tuple[str, int]]:
    """(policy, rows) of each generate call, derived from the stages and the episodes' turns."""
    calls = []
    rounds = ROUNDS.get(workflow, 1)
    for r in range(rounds):
        for stage in STAGES[workflow]:
            for policy in dict.fromkeys(routing[role] for role in stage):
                rows = sum(
                    1
                    for ep in episodes
                    for t in ep.turns
                    if t.role in stage and routing[t.role] == policy and (workflow != "eval_opt" or t.agent == r)
                )
                calls.append((policy, rows))
    return calls


@pytest.mark.parametrize("workflow, mode, knobs, batch", CASES)
def test_generate_calls_per_step_are_stages_times_policies(
    workflow, mode, knobs, batch, model_dir, tmp_path, monkeypatch
):
    prompts, generations = batch
    params = {**knobs, **({"max_iterations": MAX_ITERATIONS} if workflow == "eval_opt" else {})}
    cfg = real_scale_config(
        model_dir,
        f"{workflow}-math-qwen3-0.6b-{mode}-s0",
        tmp_path,
        training={"prompts_per_step": prompts, "num_generations": generations, "max_completion_length": MAX_NEW_TOKENS},
        workflow_params=params or None,
    )
    trainer = Trainer(cfg, tmp_path)
    spy = GenerateSpy(trainer, monkeypatch)
    episodes, _ = trainer.rollout(1)

    n_episodes = prompts * generations
    assert len(episodes) == n_episodes
    n_policies = len(set(trainer.routing.values()))
    assert n_policies == (1 if mode == "shared" else len(trainer.workflow.roles))
    if workflow == "eval_opt":  # every round ran: no verdict could be parsed, so none accepted
        assert all(ep.info["verdicts"] == [False] * MAX_ITERATIONS for ep in episodes)
        assert not any(p for ep in episodes for p in ep.info["verdicts_parsed"])
    if workflow == "voting":
        assert all(sum(t.role == "generator" for t in ep.turns) == knobs["n_votes"] for ep in episodes)
    if workflow == "orch_workers":
        assert all(1 <= len(ep.info["subtasks"]) <= knobs["max_subtasks"] for ep in episodes)

    # the count: stages x policies, the same for every n_votes, max_subtasks and batch size
    assert len(spy.calls) == EXPECTED_CALLS[workflow], spy.calls
    assert trainer.generate.calls == len(spy.calls)  # HFGenerator's own count agrees
    # and each call is the whole stage on the policy its role routes to
    assert spy.calls == expected_calls(workflow, trainer.routing, episodes)
    first_rows = n_episodes * (knobs.get("n_votes", 1))
    assert spy.calls[0][1] == first_rows  # e.g. voting: every voter of every episode in one call


def test_generation_backend_key_picks_the_rollout_backend(model_dir, tmp_path, monkeypatch):
    """training.generation_backend: hf (config.yaml's default) gives HFGenerator; vllm, where the package
    is not importable, fails at trainer start with an error naming the key; other values fail validation."""
    from tests.workflow import ROOT
    from trainer.contract.config import ConfigError
    from trainer.rl import rollout
    from trainer.sweep.config import load_yaml, validate_config

    config = load_yaml(ROOT / "config.yaml")
    assert config["training"]["generation_backend"] == "hf"
    schema = load_yaml(ROOT / "rules" / "config.schema.yaml")
    for value in ("hf", "vllm"):
        validate_config({**config, "training": {**config["training"], "generation_backend": value}}, schema)
    with pytest.raises(ConfigError, match="training.generation_backend"):
        validate_config({**config, "training": {**config["training"], "generation_backend": "sglang"}}, schema)

    run = "single-math-qwen3-0.6b-shared-s0"
    trainer = Trainer(real_scale_config(model_dir, run, tmp_path / "hf"), tmp_path / "hf")
    assert (
        type(trainer.generate.inner) is type(trainer.eval_generate.inner) is rollout.HFGenerator
    )  # under the stop check
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real_find_spec(name, *a)
    )
    cfg = real_scale_config(model_dir, run, tmp_path / "vllm", training={"generation_backend": "vllm"})
    with pytest.raises(ConfigError, match=r"training\.generation_backend: 'vllm' needs the vllm package"):
        Trainer(cfg, tmp_path / "vllm")
