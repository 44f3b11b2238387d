"""The study's workflows: each a short class, in its own module, that describes its stages and roles.

A workflow runs a batch of episodes (one per problem and rollout) stage by stage: every stage
makes one `generate(role, prompts)` call for all episodes, so the rollout engine can batch the
turns of a stage that use the same policy. Malformed outputs (a verdict, a plan, a choice) take
a defined fallback recorded in `Episode.info`; they never raise.

Owns: episode types (`episode`), output parsers (`parsers`), the base class, prompt templates
and scoring (`base`, prompts/*.yaml), the registry (`registry`) and one module per
workflow (`single`, `eval_opt`, `voting`, `orch_workers`). Adding a workflow is one module with
a `@register`ed class plus its `workflows:` entry in config.yaml; one outside this package is
named there by `module:` (see `registry`). May import `trainer.contract`, `trainer.settings` and
`trainer.tasks`; never `trainer.models`, `trainer.rl` or `trainer.sweep`, which import this package
(for names, roles and a run's cost; tests/test_package_layers.py).
"""

from trainer.workflows.base import (
    PARAM_DEFAULTS,
    Workflow,
    answer_format,
    load_prompts,
    render,
    score_episodes,
    workflow_param,
)
from trainer.workflows.episode import Completion, Episode, GenerateFn, Turn
from trainer.workflows.parsers import parse_choice, parse_plan, parse_verdict, strip_verdict
from trainer.workflows.registry import WORKFLOWS, make_workflow, register, role_facts, workflow_class

# the built-in workflows register themselves on import
from trainer.workflows import eval_opt, orch_workers, single, voting  # noqa: E402,F401  isort: skip

__all__ = [
    "PARAM_DEFAULTS",
    "WORKFLOWS",
    "Completion",
    "Episode",
    "GenerateFn",
    "Turn",
    "Workflow",
    "answer_format",
    "load_prompts",
    "make_workflow",
    "parse_choice",
    "parse_plan",
    "parse_verdict",
    "register",
    "render",
    "role_facts",
    "score_episodes",
    "strip_verdict",
    "workflow_class",
    "workflow_param",
]
