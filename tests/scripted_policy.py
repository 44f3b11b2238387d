"""A scripted fake policy for running workflows end to end: it answers each stage from a script (one
reply per prompt, in the order the workflow asks), so every turn's text is known. The problems, right and
wrong replies, and the run and settings helpers that tests/test_scripted_prompts.py and
tests/test_scripted_rewards.py share."""

from __future__ import annotations

import pytest

from trainer.settings import TrainingSettings
from trainer.tasks import Problem
from trainer.workflows import Completion, make_workflow, score_episodes

FORMAT = "Put the final answer in \\boxed{}."
P = [
    Problem(
        id=f"p{i}",
        question=f"Calculate {i} + 1.",
        answer=str(i + 1),
        demonstration=f"{i} + 1 = \\boxed{{{i + 1}}}",
        source="test",
    )
    for i in range(2)
]
RIGHT = {p.id: f"\\boxed{{{p.answer}}}" for p in P}
WRONG = "\\boxed{9}"
EPS = 1e-4  # group_advantages' std offset (TRL's)


class Script:
    """A fake policy: per role, the replies in the order the workflow asks; records every prompt."""

    def __init__(self, **replies: list[str]):
        self.replies = {role: list(texts) for role, texts in replies.items()}
        self.seen: list[tuple[str, str]] = []

    def __call__(self, role: str, prompts: list[str]) -> list[Completion]:
        queue = self.replies[role]
        assert len(queue) >= len(prompts), f"the script has {len(queue)} {role} replies left, {len(prompts)} asked"
        out, self.replies[role] = queue[: len(prompts)], queue[len(prompts) :]
        self.seen += [(role, p) for p in prompts]
        return [Completion(text) for text in out]

    def done(self) -> bool:
        return not any(self.replies.values())


def run(math_task, name: str, params: dict, problems: list[Problem], **replies: list[str]):
    """`name`'s workflow run on `problems` under a Script of `replies`, every reply used, scored:
    (workflow, episodes, script)."""
    wf = make_workflow(name, params, math_task)
    script = Script(**replies)
    episodes = wf.run(problems, script)
    assert script.done(), f"unused replies: {script.replies}"
    score_episodes(wf, episodes)
    return wf, episodes, script


def training(
    reward_mode="final_outcome",
    advantage_grouping="role_instance",
    scale_rewards="group",
    normalize_advantages_per_role=False,
) -> TrainingSettings:
    """Training settings with the reward and advantage choices given, the rest default."""
    return TrainingSettings(
        reward_mode=reward_mode,
        advantage_grouping=advantage_grouping,
        scale_rewards=scale_rewards,
        normalize_advantages_per_role=normalize_advantages_per_role,
    )


def per_turn(episodes, what: str) -> list[list[float]]:
    """Each episode's turns' attribute `what`."""
    return [[getattr(t, what) for t in ep.turns] for ep in episodes]


def approx(rows: list[list[float]]):
    """Rows of floats compared within 1e-12."""
    return [pytest.approx(r, abs=1e-12) for r in rows]
