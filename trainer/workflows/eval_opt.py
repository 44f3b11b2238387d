"""Evaluator-optimizer: the generator solves, the evaluator judges; revise until Correct or `max_iterations`."""

from __future__ import annotations

from trainer.workflows.base import Workflow, workflow_param
from trainer.workflows.episode import Episode, Turn, mean
from trainer.workflows.parsers import parse_verdict, strip_verdict
from trainer.workflows.registry import register


@register
class EvalOpt(Workflow):
    """Generator solves, evaluator judges \\boxed{Correct}/\\boxed{Incorrect}; revise until Correct or `max_iterations`."""

    name, roles = "eval_opt", ("generator", "evaluator")

    @classmethod
    def max_turns(cls, params):
        return 2 * workflow_param(params, "max_iterations")

    def run(self, problems, generate):
        rounds = workflow_param(self.params, "max_iterations")
        episodes = [Episode(p, info={"verdicts": [], "verdicts_parsed": []}) for p in problems]
        active = list(range(len(episodes)))
        feedback: dict[int, str] = {}
        for r in range(rounds):
            if not active:
                break
            prompts = []
            for i in active:
                ep = episodes[i]
                if r == 0:
                    prompts.append(self.prompt("generator", problem=ep.problem.question))
                else:
                    prompts.append(
                        self.prompt(
                            "reviser", problem=ep.problem.question, solution=ep.final_text, feedback=feedback[i]
                        )
                    )
            for i, q, o in zip(active, prompts, generate("generator", prompts)):
                episodes[i].turns.append(Turn("generator", r, q, o))
                episodes[i].final_text = o.text
            eval_prompts = [
                self.prompt("evaluator", problem=episodes[i].problem.question, solution=episodes[i].final_text)
                for i in active
            ]
            still = []
            for i, q, o in zip(active, eval_prompts, generate("evaluator", eval_prompts)):
                verdict = parse_verdict(o.text)
                ep = episodes[i]
                ep.turns.append(Turn("evaluator", r, q, o))
                ep.info["verdicts"].append(bool(verdict))  # unparseable counts as Incorrect: revise
                ep.info["verdicts_parsed"].append(verdict is not None)
                feedback[i] = strip_verdict(o.text)
                if not verdict:
                    still.append(i)
            active = still
        return episodes

    def demonstrations(self, problem, wrong, rng):
        bad = rng.choice(wrong)
        feedback = "The answer is wrong."
        return [
            (self.prompt("generator", problem=problem.question), problem.demonstration),
            (self.prompt("evaluator", problem=problem.question, solution=problem.demonstration), "\\boxed{Correct}"),
            (self.prompt("evaluator", problem=problem.question, solution=bad), f"{feedback} \\boxed{{Incorrect}}"),
            (self.prompt("reviser", problem=problem.question, solution=bad, feedback=feedback), problem.demonstration),
        ]

    def _judged(self, ep: Episode) -> list[tuple[bool, bool, bool]]:
        """(verdict, whether the judged solution was correct, whether the verdict parsed) per round."""
        gens = [t for t in ep.turns if t.role == "generator"]
        return [
            (v, bool(g.score and g.score.score > 0), p)
            for v, g, p in zip(ep.info["verdicts"], gens, ep.info["verdicts_parsed"])
        ]

    def diagnostics(self, episodes):
        judged = [j for ep in episodes for j in self._judged(ep)]
        first = [t for ep in episodes for t in ep.turns if t.role == "generator" and t.agent == 0]
        return {
            "generator_first_accuracy": mean([bool(t.score and t.score.score > 0) for t in first]),
            "evaluator_accept_rate": mean([v for v, _, _ in judged]),
            "evaluator_accuracy": mean([parsed and v == ok for v, ok, parsed in judged]),
            "verdict_parse_rate": mean([p for ep in episodes for p in ep.info["verdicts_parsed"]]),
            "mean_iterations": mean([len(ep.info["verdicts"]) for ep in episodes]),
        }

    def role_reward(self, episode, turn):
        if turn.role == "generator":
            return turn.score.score if turn.score else 0.0
        # an unparseable verdict is no judgement: it earns nothing, even on a wrong solution (where
        # counting it as Incorrect would reward the evaluator for dropping the format)
        verdict, ok, parsed = self._judged(episode)[turn.agent]
        return float(parsed and verdict == ok)
