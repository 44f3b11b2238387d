"""What a workflow produces: completions, turns and episodes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainer.tasks import Problem, Score


@dataclass
class Completion:
    """A generated turn: its text and, when it came from a model, the token ids."""

    text: str
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None  # the engine's log-prob of each completion token (vllm backend)


@dataclass
class Turn:
    """One model call of an episode."""

    role: str
    agent: int  # the role instance: voter k, worker k, or the eval_opt round
    prompt: str  # the user message the role saw
    completion: Completion
    score: Score | None = None  # set for turns that answer the problem (generator, synthesizer)
    reward: float = 0.0
    advantage: float = 0.0


@dataclass
class Episode:
    """One workflow run on one problem."""

    problem: Problem
    turns: list[Turn] = field(default_factory=list)
    final_text: str = ""
    score: Score | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def correct(self) -> bool:
        return bool(self.score and self.score.score > 0)


# generate(role, prompts) -> one completion per prompt: what a workflow asks of the rollout engine
GenerateFn = Callable[[str, list[str]], list[Completion]]


def mean(values: list[float | bool]) -> float:
    """The mean of `values`, NaN when there are none (a diagnostic with nothing to measure)."""
    return sum(map(float, values)) / len(values) if values else float("nan")
