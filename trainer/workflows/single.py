"""The single-agent baseline: one generator call."""

from __future__ import annotations

from trainer.workflows.base import Workflow
from trainer.workflows.episode import Episode, Turn
from trainer.workflows.registry import register


@register
class Single(Workflow):
    """The single-agent baseline: one generator call."""

    name, roles = "single", ("generator",)

    def run(self, problems, generate):
        prompts = [self.prompt("generator", problem=p.question) for p in problems]
        outs = generate("generator", prompts)
        return [Episode(p, [Turn("generator", 0, q, o)], final_text=o.text) for p, q, o in zip(problems, prompts, outs)]

    def demonstrations(self, problem, wrong, rng):
        return [(self.prompt("generator", problem=problem.question), problem.demonstration)]

    def role_reward(self, episode, turn):
        return turn.score.score if turn.score else 0.0

    @classmethod
    def max_turns(cls, params):
        return 1
