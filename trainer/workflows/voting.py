"""Voting: `n_votes` voters answer in parallel (one role); the aggregator picks one solution."""

from __future__ import annotations

from trainer.tasks import Problem
from trainer.workflows.base import Workflow, workflow_param
from trainer.workflows.episode import Episode, Turn, mean
from trainer.workflows.parsers import parse_choice
from trainer.workflows.registry import register


@register
class Voting(Workflow):
    """`n_votes` voters answer in parallel (one role); the aggregator picks one solution as \\boxed{k}."""

    name, roles = "voting", ("generator", "aggregator")
    parallel_role = "generator"

    @property
    def n_votes(self) -> int:
        return workflow_param(self.params, "n_votes")

    @classmethod
    def max_turns(cls, params):
        return workflow_param(params, "n_votes") + 1

    @classmethod
    def parallel_agents(cls, params):
        return workflow_param(params, "n_votes")

    def aggregator_prompt(self, problem: Problem, solutions: list[str]) -> str:
        numbered = "\n\n".join(f"Solution {k + 1}: {s}" for k, s in enumerate(solutions))
        return self.prompt("aggregator", problem=problem.question, solutions=numbered)

    def run(self, problems, generate):
        n = self.n_votes
        episodes = [Episode(p) for p in problems]
        prompts = [self.prompt("generator", problem=p.question) for p in problems for _ in range(n)]
        outs = generate("generator", prompts)
        for i, ep in enumerate(episodes):
            ep.turns = [Turn("generator", k, prompts[i * n + k], outs[i * n + k]) for k in range(n)]
        agg_prompts = [self.aggregator_prompt(ep.problem, [t.completion.text for t in ep.turns]) for ep in episodes]
        for ep, prompt, out in zip(episodes, agg_prompts, generate("aggregator", agg_prompts)):
            choice, parsed = parse_choice(out.text, n)
            ep.turns.append(Turn("aggregator", 0, prompt, out))
            ep.final_text = ep.turns[choice].completion.text
            ep.info.update(choice=choice, choice_parsed=parsed)
        return episodes

    def demonstrations(self, problem, wrong, rng):
        solutions = [problem.demonstration] + [rng.choice(wrong) for _ in range(self.n_votes - 1)]
        rng.shuffle(solutions)
        pick = solutions.index(problem.demonstration) + 1
        return [
            (self.prompt("generator", problem=problem.question), problem.demonstration),
            (self.aggregator_prompt(problem, solutions), f"\\boxed{{{pick}}}"),
        ]

    def diagnostics(self, episodes):
        voters = [[t for t in ep.turns if t.role == "generator"] for ep in episodes]
        voter_ok = [[bool(t.score and t.score.score > 0) for t in vs] for vs in voters]
        any_ok = [any(v) for v in voter_ok]
        picked_ok = [ep.correct for ep, a in zip(episodes, any_ok) if a]
        agree = []
        for vs in voters:
            answers = [self.task.extract_answer(t.completion.text) for t in vs]
            pairs = [(a, b) for i, a in enumerate(answers) for b in answers[i + 1 :]]
            agree.append(sum(self.task.answers_agree(a, b) for a, b in pairs) / max(len(pairs), 1))
        slots = [ep.info["choice"] for ep in episodes]
        return {
            "voter_accuracy": mean([x for v in voter_ok for x in v]),
            "any_voter_correct": mean(any_ok),
            "aggregator_accuracy": mean(picked_ok),
            "choice_parse_rate": mean([ep.info["choice_parsed"] for ep in episodes]),
            "vote_agreement": mean(agree),
            "top_slot_share": max(slots.count(s) for s in set(slots)) / len(slots) if slots else float("nan"),
        }

    def role_reward(self, episode, turn):
        if turn.role == "generator":
            return turn.score.score if turn.score else 0.0
        return episode.score.score if episode.score else 0.0  # the aggregator: the solution it chose
