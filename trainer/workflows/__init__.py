"""The study's workflows. Each is a short class that describes its stages and roles.

A workflow runs a batch of episodes (one per problem and rollout) stage by stage: every stage
makes one `generate(role, prompts)` call for all episodes, so the rollout engine can batch the
turns of a stage that use the same policy. Malformed outputs (a verdict, a plan, a choice) take
a defined fallback recorded in `Episode.info`; they never raise.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Callable, ClassVar

import yaml

from trainer.sweep.config import is_eval_step
from trainer.tasks import Problem, Score, Task


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


GenerateFn = Callable[[str, list[str]], list[Completion]]


PARAM_DEFAULTS = {"n_votes": 3, "max_iterations": 3, "max_subtasks": 3}


def workflow_param(params: dict[str, Any], key: str) -> int:
    """An integer workflow parameter of `params`, or its default (PARAM_DEFAULTS) when unset."""
    return int(params.get(key, PARAM_DEFAULTS[key]))


def render(template: str, **fields: Any) -> str:
    """Fill `{name}` placeholders; other braces (as in \\boxed{}) stay as they are."""
    for name, value in fields.items():
        template = template.replace("{" + name + "}", str(value))
    return template


def load_prompts(workflow: str, overrides: dict[str, str] | None = None) -> dict[str, str]:
    """The workflow's packaged prompt templates, with any overrides from config."""
    text = resources.files("trainer").joinpath(f"workflows/prompts/{workflow}.yaml").read_text()
    prompts = yaml.safe_load(text)
    prompts.update(overrides or {})
    return prompts


def answer_format(task: str) -> str:
    """The answer format a task asks for (from prompts/common.yaml)."""
    common = yaml.safe_load(resources.files("trainer").joinpath("workflows/prompts/common.yaml").read_text())
    return common["answer_format"][task]


_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def parse_verdict(text: str) -> bool | None:
    """True for \\boxed{Correct}, False for \\boxed{Incorrect}, None when neither (the last wins)."""
    verdicts = [v.strip().lower() for v in _BOXED.findall(text) if v.strip().lower() in ("correct", "incorrect")]
    return None if not verdicts else verdicts[-1] == "correct"


def parse_choice(text: str, n: int) -> tuple[int, bool]:
    """The 0-based solution the aggregator picked and whether it was well formed.

    \\boxed{k} with 1 <= k <= n; else the first digit in range; else solution 1.
    """
    for value in reversed(_BOXED.findall(text)):
        if value.strip().isdigit() and 1 <= int(value.strip()) <= n:
            return int(value.strip()) - 1, True
    for digit in re.findall(r"\d", text):
        if 1 <= int(digit) <= n:
            return int(digit) - 1, False
    return 0, False


def parse_plan(text: str, max_subtasks: int) -> tuple[list[str], str]:
    """Subtasks from `SUBTASK k:` lines, else a numbered list, else non-empty lines; and which rule applied."""
    subtasks = re.findall(r"^\s*SUBTASK\s*\d+\s*:\s*(.+?)\s*$", text, flags=re.MULTILINE | re.IGNORECASE)
    how = "subtask"
    if not subtasks:
        subtasks, how = re.findall(r"^\s*\d+[.)]\s*(.+?)\s*$", text, flags=re.MULTILINE), "numbered"
    if not subtasks:
        subtasks, how = [line.strip() for line in text.splitlines() if line.strip()], "lines"
    return subtasks[:max_subtasks], how if subtasks else "empty"


def strip_verdict(text: str) -> str:
    """The evaluator's feedback without its boxed verdict."""
    return _BOXED.sub("", text).strip()


class Workflow:
    """Base class: a workflow's roles, prompts and how it turns stages into episodes."""

    name: ClassVar[str]
    roles: ClassVar[tuple[str, ...]]
    answer_roles: ClassVar[tuple[str, ...]] = ("generator",)  # turns scored against the gold answer

    def __init__(self, params: dict[str, Any], task: Task, prompts: dict[str, str] | None = None):
        self.params = params
        self.task = task
        self.prompts = prompts or load_prompts(self.name)
        self.fields = {"answer_format": answer_format(task.name)}

    def prompt(self, key: str, **fields: Any) -> str:
        return render(self.prompts[key], **self.fields, **fields)

    def run(self, problems: list[Problem], generate: GenerateFn) -> list[Episode]:
        """Run one episode per problem; sets each episode's turns, final_text and info."""
        raise NotImplementedError

    def demonstrations(self, problem: Problem, wrong: list[str], rng: random.Random) -> list[tuple[str, str]]:
        """(prompt, completion) pairs in every role's format, for the supervised warm start."""
        raise NotImplementedError

    def diagnostics(self, episodes: list[Episode]) -> dict[str, float]:
        """Role-level eval diagnostics, after scoring."""
        return {}

    def role_reward(self, episode: Episode, turn: Turn) -> float:
        """The per_role reward of a turn (the study's ablation); the final outcome unless overridden."""
        return episode.score.score if episode.score else 0.0

    @classmethod
    def max_turns(cls, params: dict[str, Any]) -> int:
        """The most model calls one episode makes under `params`."""
        raise NotImplementedError


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


class Voting(Workflow):
    """`n_votes` voters answer in parallel (one role); the aggregator picks one solution as \\boxed{k}."""

    name, roles = "voting", ("generator", "aggregator")

    @property
    def n_votes(self) -> int:
        return workflow_param(self.params, "n_votes")

    @classmethod
    def max_turns(cls, params):
        return workflow_param(params, "n_votes") + 1

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
        return [(self.prompt("generator", problem=problem.question), problem.demonstration),
                (self.aggregator_prompt(problem, solutions), f"\\boxed{{{pick}}}")]

    def diagnostics(self, episodes):
        voters = [[t for t in ep.turns if t.role == "generator"] for ep in episodes]
        voter_ok = [[bool(t.score and t.score.score > 0) for t in vs] for vs in voters]
        any_ok = [any(v) for v in voter_ok]
        picked_ok = [ep.correct for ep, a in zip(episodes, any_ok) if a]
        agree = []
        for vs in voters:
            answers = [self.task.extract_answer(t.completion.text) for t in vs]
            pairs = [(a, b) for i, a in enumerate(answers) for b in answers[i + 1:]]
            agree.append(sum(self.task.answers_agree(a, b) for a, b in pairs) / max(len(pairs), 1))
        slots = [ep.info["choice"] for ep in episodes]
        return {
            "voter_accuracy": _mean([x for v in voter_ok for x in v]),
            "any_voter_correct": _mean(any_ok),
            "aggregator_accuracy": _mean(picked_ok),
            "choice_parse_rate": _mean([ep.info["choice_parsed"] for ep in episodes]),
            "vote_agreement": _mean(agree),
            "top_slot_share": max(slots.count(s) for s in set(slots)) / len(slots) if slots else float("nan"),
        }

    def role_reward(self, episode, turn):
        if turn.role == "generator":
            return turn.score.score if turn.score else 0.0
        return episode.score.score if episode.score else 0.0  # the aggregator: the solution it chose


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
                    prompts.append(self.prompt("reviser", problem=ep.problem.question,
                                               solution=ep.final_text, feedback=feedback[i]))
            for i, q, o in zip(active, prompts, generate("generator", prompts)):
                episodes[i].turns.append(Turn("generator", r, q, o))
                episodes[i].final_text = o.text
            eval_prompts = [self.prompt("evaluator", problem=episodes[i].problem.question,
                                        solution=episodes[i].final_text) for i in active]
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
        return [(v, bool(g.score and g.score.score > 0), p)
                for v, g, p in zip(ep.info["verdicts"], gens, ep.info["verdicts_parsed"])]

    def diagnostics(self, episodes):
        judged = [j for ep in episodes for j in self._judged(ep)]
        first = [t for ep in episodes for t in ep.turns if t.role == "generator" and t.agent == 0]
        return {
            "generator_first_accuracy": _mean([bool(t.score and t.score.score > 0) for t in first]),
            "evaluator_accept_rate": _mean([v for v, _, _ in judged]),
            "evaluator_accuracy": _mean([parsed and v == ok for v, ok, parsed in judged]),
            "verdict_parse_rate": _mean([p for ep in episodes for p in ep.info["verdicts_parsed"]]),
            "mean_iterations": _mean([len(ep.info["verdicts"]) for ep in episodes]),
        }

    def role_reward(self, episode, turn):
        if turn.role == "generator":
            return turn.score.score if turn.score else 0.0
        # an unparseable verdict is no judgement: it earns nothing, even on a wrong solution (where
        # counting it as Incorrect would reward the evaluator for dropping the format)
        verdict, ok, parsed = self._judged(episode)[turn.agent]
        return float(parsed and verdict == ok)


class OrchWorkers(Workflow):
    """Orchestrator plans subtasks; workers solve them in parallel (one role); synthesizer answers."""

    name, roles = "orch_workers", ("orchestrator", "worker", "synthesizer")
    answer_roles = ("synthesizer",)

    @property
    def max_subtasks(self) -> int:
        return workflow_param(self.params, "max_subtasks")

    @classmethod
    def max_turns(cls, params):
        return workflow_param(params, "max_subtasks") + 2

    def worker_prompt(self, problem: Problem, subtask: str) -> str:
        key = "worker_with_task" if self.params.get("share_main_task_with_workers") else "worker"
        return self.prompt(key, problem=problem.question, subtask=subtask)

    def synthesizer_prompt(self, problem: Problem, subtasks: list[str], results: list[str]) -> str:
        text = "\n".join(f"Subtask {k + 1}: {s}\nResult: {r}" for k, (s, r) in enumerate(zip(subtasks, results)))
        return self.prompt("synthesizer", problem=problem.question, results=text)

    def run(self, problems, generate):
        episodes = [Episode(p) for p in problems]
        plan_prompts = [self.prompt("orchestrator", problem=p.question, max_subtasks=self.max_subtasks)
                        for p in problems]
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
        synth_prompts = [self.synthesizer_prompt(ep.problem, ep.info["subtasks"], results[i])
                         for i, ep in enumerate(episodes)]
        for ep, q, o in zip(episodes, synth_prompts, generate("synthesizer", synth_prompts)):
            ep.turns.append(Turn("synthesizer", 0, q, o))
            ep.final_text = o.text
        return episodes

    def demonstrations(self, problem, wrong, rng):
        subtask = problem.question
        return [
            (self.prompt("orchestrator", problem=problem.question, max_subtasks=self.max_subtasks),
             f"SUBTASK 1: {subtask}"),
            (self.worker_prompt(problem, subtask), problem.demonstration),
            (self.synthesizer_prompt(problem, [subtask], [problem.demonstration]), problem.demonstration),
        ]

    def diagnostics(self, episodes):
        workers = [t for ep in episodes for t in ep.turns if t.role == "worker"]
        return {
            "subtasks_mean": _mean([len(ep.info["subtasks"]) for ep in episodes]),
            "plan_parse_rate": _mean([ep.info["plan_rule"] == "subtask" for ep in episodes]),
            "worker_success": _mean([self.task.extract_answer(t.completion.text) is not None for t in workers]),
        }


def _mean(values: list[float | bool]) -> float:
    return sum(map(float, values)) / len(values) if values else float("nan")


WORKFLOWS: dict[str, type[Workflow]] = {w.name: w for w in (Single, Voting, EvalOpt, OrchWorkers)}


def make_workflow(name: str, params: dict[str, Any], task: Task, prompts: dict[str, str] | None = None) -> Workflow:
    """The workflow called `name`, naming the known ones if it is not."""
    if name not in WORKFLOWS:
        raise ValueError(f"unknown workflow {name!r}: known are {sorted(WORKFLOWS)}")
    cls = WORKFLOWS[name]
    return cls(params, task, load_prompts(name, prompts))


def run_turns(run_config: dict[str, Any]) -> int:
    """The most model calls a run makes: turns per episode times its training and eval episodes.

    A cost estimate that needs no model: the train rule's priority, so that the longest runs of
    a sweep start first and none is left running alone at its end.
    """
    t = run_config["training"]
    train = t["max_steps"] * t["prompts_per_step"] * t["num_generations"]
    evals = sum(is_eval_step(step, t) for step in range(t["max_steps"] + 1))
    per_eval = sum(min(spec.get("size", t["eval_problems"]), t["eval_problems"])  # real eval sets: no `size`
                   for spec in run_config["task_params"]["eval"])
    return WORKFLOWS[run_config["workflow"]].max_turns(run_config["workflow_params"]) * (train + evals * per_eval)


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
