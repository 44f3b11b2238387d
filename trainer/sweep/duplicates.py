"""No run twice under two names: a run's effective settings, and the check that no two runs of a matrix share them.

Two run ids whose effective settings are equal would compute the same run twice (and count it twice in the
analysis), e.g. a variant whose delta changes nothing that the workflow reads. The check runs with the config's
(trainer.sweep.config.validate_config), so such a matrix fails at `snakemake -n`, naming both runs.
"""

from __future__ import annotations

import json
from typing import Any

from trainer.contract.config import hashed_view
from trainer.contract.runid import RunId
from trainer.workflows import workflow_class
from trainer.workflows.base import Workflow

IDENTITY_KEYS = ("run",)  # keys of the hashed view that only name a run (a variant's name is not hashed)


def has_role_rewards(workflow: str, params: dict[str, Any]) -> bool:
    """Whether a workflow rewards its roles each by a measure of its own under `training.reward_mode: per_role`;
    one that does not (orch_workers) rewards every role by the final outcome (Workflow.role_reward)."""
    return workflow_class(workflow, params).role_reward is not Workflow.role_reward


def effective_settings(run_config: dict[str, Any]) -> dict[str, Any]:
    """What decides a run's results: its hashed view (trainer.contract.config) without the keys that only name
    it (IDENTITY_KEYS), with `training.reward_mode` as `final_outcome` where the workflow has no per-role reward
    of its own, since that setting then computes the same rewards."""
    view = {k: v for k, v in hashed_view(run_config).items() if k not in IDENTITY_KEYS}
    training = view.get("training") or {}
    if training.get("reward_mode") == "per_role" and not has_role_rewards(
        run_config["workflow"], run_config["workflow_params"]
    ):
        view["training"] = {**training, "reward_mode": "final_outcome"}
    return view


def duplicate_run_problems(resolved: dict[RunId, dict[str, Any]], matrix: str) -> list[str]:
    """One line per run whose effective settings equal an earlier run's, naming both (empty: none).

    `resolved` is trainer.sweep.config.resolve_matrix's for `matrix`: the runs of a cell differ in their seed
    alone, so each cell's settings are compared once, and runs of the same seed across cells.
    """
    cell_key: dict[str, str] = {}
    first: dict[tuple[int, str], RunId] = {}
    problems = []
    for run, run_config in resolved.items():
        if run.cell not in cell_key:
            view = effective_settings(run_config)
            view.pop("seed", None)
            cell_key[run.cell] = json.dumps(view, sort_keys=True, default=str)
        key = (run.seed, cell_key[run.cell])
        if key not in first:
            first[key] = run
            continue
        variants = [r.variant for r in (first[key], run) if r.variant]
        fix = (
            f": variant {variants[-1]!r} changes nothing these runs read; name the workflows it changes "
            f"(matrices.{matrix}.variants.{variants[-1]}.applies_to)"
            if variants
            else ""
        )
        problems.append(f"runs {first[key]} and {run} have equal effective settings (one run under two names){fix}")
    return problems
