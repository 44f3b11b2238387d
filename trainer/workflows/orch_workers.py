"""Orchestrator-workers: the orchestrator plans subtasks, workers solve them in parallel, the synthesizer answers."""

from __future__ import annotations

from trainer.tasks import Problem
from trainer.workflows.base import Workflow, workflow_param
from trainer.workflows.episode import Episode, Turn, mean
from trainer.workflows.parsers import parse_plan
from trainer.workflows.registry import register


@register
class OrchWorkers(Workflow):
    """Orchestrator plans subtasks; workers solve them in parallel (one role); synthesizer answers."""

    name, roles = "orch_workers", ("orchestrator", "worker", "synthesizer")
    answer_roles = ("synthesizer",)
    parallel_role = "worker"

    @property
    def max_subtasks(self) -> int:
        return workflow_param(self.params, "max_subtasks")

    @classmethod
    def max_turns(cls, params):
        return workflow_param(params, "max_subtasks") + 2

    @classmethod
    def parallel_agents(cls, params):
        return workflow_param(params, "max_subtasks")

    def worker_prompt(self, problem: Problem, subtask: str) -> str:
        key = "worker_with_task" if self.params.get("share_main_task_with_workers") else "worker"
        return self.prompt(key, problem=problem.question, subtask=subtask)

    def synthesizer_prompt(self, problem: Problem, subtasks: list[str], results: list[str]) -> str:
        text = "\n".join(f"Subtask {k + 1}: {s}\nResult: {r}" for k, (s, r) in enumerate(zip(subtasks, results)))
        return self.prompt("synthesizer", problem=problem.question, results=text)

    def run(self, problems, generate):
        episodes = [Episode(p) for p in problems]
        plan_prompts = [
            self.prompt("orchestrator", problem=p.question, max_subtasks=self.max_subtasks) for p in problems
        ]
        work = []  # (episode index, subtask)
        for i, (q, o) in enumerate(zip(plan_prompts, generate("orchestrator", plan_prompts))):
            subtasks, how = parse_plan(o.text, self.max_subtasks)
            if not subtasks:  # nothing usable: the worker gets the whole problem
                subtasks = [problems[i].question]
            episodes[i].turns.append(Turn("orchestrator", 0, q, o))
            episodes[i].info.update(subtasks=subtasks, plan_rule=how)
            work += [(i, s) for s in subtasks]
        worker_prompts = [self.worker_prompt(problems[i], s) for i, s in work]
        results: dict[int, list[str]] = {i: [] for i in range(len(problems))}
        for (i, _), q, o in zip(work, worker_prompts, generate("worker", worker_prompts)):
            episodes[i].turns.append(Turn("worker", len(results[i]), q, o))
            results[i].append(o.text)
        synth_prompts = [
            self.synthesizer_prompt(ep.problem, ep.info["subtasks"], results[i]) for i, ep in enumerate(episodes)
        ]
        for ep, q, o in zip(episodes, synth_prompts, generate("synthesizer", synth_prompts)):
            ep.turns.append(Turn("synthesizer", 0, q, o))
            ep.final_text = o.text
        return episodes

    def demonstrations(self, problem, wrong, rng):
        subtask = problem.question
        return [
            (
                self.prompt("orchestrator", problem=problem.question, max_subtasks=self.max_subtasks),
                f"SUBTASK 1: {subtask}",
            ),
            (self.worker_prompt(problem, subtask), problem.demonstration),
            (self.synthesizer_prompt(problem, [subtask], [problem.demonstration]), problem.demonstration),
        ]

    def diagnostics(self, episodes):
        workers = [t for ep in episodes for t in ep.turns if t.role == "worker"]
        return {
            "subtasks_mean": mean([len(ep.info["subtasks"]) for ep in episodes]),
            "plan_parse_rate": mean([ep.info["plan_rule"] == "subtask" for ep in episodes]),
            "worker_success": mean([self.task.extract_answer(t.completion.text) is not None for t in workers]),
        }
