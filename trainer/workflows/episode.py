"""What a workflow produces: completions, turns and episodes, and how their answers are scored."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from trainer.tasks import Problem, Score

if TYPE_CHECKING:
    from trainer.workflows.base import Workflow


@dataclass
class Completion:
    """A generated turn: its text and, when it came from a model, the token ids."""

    text: str
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)


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


def score_episodes(workflow: Workflow, episodes: list[Episode]) -> None:
    """Score every answering turn and every final answer in one batch; set Turn.score and Episode.score.

    Identical (problem, text) pairs are scored once: a final answer is always one of the turns'.
    """
    pairs = [(ep.problem, t.completion.text) for ep in episodes for t in ep.turns if t.role in workflow.answer_roles]
    pairs += [(ep.problem, ep.final_text) for ep in episodes]
    unique = list(dict.fromkeys((p.id, text) for p, text in pairs))
    by_id = {p.id: p for p, _ in pairs}
    scores = dict(zip(unique, workflow.task.score_batch([by_id[i] for i, _ in unique], [t for _, t in unique])))
    for ep in episodes:
        for t in ep.turns:
            if t.role in workflow.answer_roles:
                t.score = scores[(ep.problem.id, t.completion.text)]
        ep.score = scores[(ep.problem.id, ep.final_text)]


def mean(values: list[float | bool]) -> float:
    """The mean of `values`, NaN when there are none (a diagnostic with nothing to measure)."""
    return sum(map(float, values)) / len(values) if values else float("nan")
