"""The base class every workflow derives from, its parameters, its prompt templates, and episode scoring."""

from __future__ import annotations

import random
from importlib import resources
from typing import Any, ClassVar

import yaml

from trainer.settings import WorkflowSettings, default_of
from trainer.tasks import Problem, Task
from trainer.workflows.episode import Episode, GenerateFn, Turn

PARAM_DEFAULTS = {k: default_of(WorkflowSettings, k) for k in ("n_votes", "max_iterations", "max_subtasks")}


def workflow_param(params: dict[str, Any], key: str) -> int:
    """An integer workflow parameter of `params`, or its default (trainer.settings.WorkflowSettings) when unset."""
    return int(params.get(key, PARAM_DEFAULTS[key]))


def render(template: str, **fields: Any) -> str:
    """Fill `{name}` placeholders; other braces (as in \\boxed{}) stay as they are."""
    for name, value in fields.items():
        template = template.replace("{" + name + "}", str(value))
    return template


def _packaged_yaml(name: str) -> dict[str, Any]:
    return yaml.safe_load(resources.files("trainer").joinpath(f"workflows/prompts/{name}.yaml").read_text())


def load_prompts(workflow: str, overrides: dict[str, str] | None = None) -> dict[str, str]:
    """A packaged workflow's prompt templates (prompts/<workflow>.yaml), with any overrides."""
    return {**_packaged_yaml(workflow), **(overrides or {})}


def answer_format(task: str) -> str:
    """The answer format a task asks for (from prompts/common.yaml)."""
    return _packaged_yaml("common")["answer_format"][task]


class Workflow:
    """Base class: a workflow's roles, prompts and how it turns stages into episodes.

    A subclass registers itself with `@register` (trainer.workflows.registry) under `name`. Its
    prompts are prompts/<name>.yaml, or `prompt_templates` for a workflow defined outside this
    package. What the analysis needs to know of it (`roles`, `parallel_role` and
    `parallel_agents`) is written into each run's config.json, so analysis never repeats it.
    """

    name: ClassVar[str]
    roles: ClassVar[tuple[str, ...]]
    answer_roles: ClassVar[tuple[str, ...]] = ("generator",)  # turns scored against the gold answer
    parallel_role: ClassVar[str | None] = None  # a role with several agents on one prompt (voters, workers)
    prompt_templates: ClassVar[dict[str, str] | None] = None  # None: the packaged prompts/<name>.yaml

    def __init__(self, params: dict[str, Any], task: Task, prompts: dict[str, str] | None = None):
        self.params = params
        self.task = task
        self.prompts = {**self.default_prompts(), **(prompts or {})}
        self.fields = {"answer_format": answer_format(task.name)}

    @classmethod
    def default_prompts(cls) -> dict[str, str]:
        """The workflow's own prompt templates: `prompt_templates`, else the packaged YAML file."""
        return dict(cls.prompt_templates) if cls.prompt_templates is not None else load_prompts(cls.name)

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

    @classmethod
    def parallel_agents(cls, params: dict[str, Any]) -> int:
        """How many agents of `parallel_role` answer one prompt under `params` (at most); 1 without one."""
        return 1


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
