"""What a run costs before it runs: its most model calls, the train rule's priority."""

from __future__ import annotations

from typing import Any

from trainer.settings import is_eval_step
from trainer.workflows import workflow_class


def run_turns(run_config: dict[str, Any]) -> int:
    """The most model calls a run makes: turns per episode times its training and eval episodes.

    A cost estimate that needs no model: the train rule's priority, so that the longest runs of
    a sweep start first and none is left running alone at its end.
    """
    t = run_config["training"]
    train = t["max_steps"] * t["prompts_per_step"] * t["num_generations"]
    evals = sum(is_eval_step(step, t["eval_every"], t["max_steps"]) for step in range(t["max_steps"] + 1))
    per_eval = sum(min(spec.get("size", t["eval_problems"]), t["eval_problems"])  # real eval sets: no `size`
                   for spec in run_config["task_params"]["eval"])
    cls = workflow_class(run_config["workflow"], run_config["workflow_params"])
    return cls.max_turns(run_config["workflow_params"]) * (train + evals * per_eval)
