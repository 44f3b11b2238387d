"""Per-run facts the claim tables need beyond the accuracy curve: the run's variant and its parallel agents.

- `variant`: the optional run-id axis (`{workflow}-{task}-{scale}-{policy}-s{seed}-{variant}`); "" for plain runs.
- `agent_facts`: how many parallel agents the run's parallel role had (train.parquet's `n_agents`, else the
  config's `n_votes` / `max_subtasks`, else config.json's `parallel_role`), and that role's mean
  amplification index (sum_k ||g_k|| / ||sum_k g_k||) and agent cosine where train.parquet logs them.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pandas as pd

from trainer.contract.rundir import WorkflowRoles

# the config key that counts each study workflow's parallel agents (workflow_params.<key>)
AGENT_KEYS = {"voting": "n_votes", "orch_workers": "max_subtasks"}
_VARIANT = re.compile(r"-s\d+-(.+)$")


def variant(config: dict[str, Any]) -> str:
    """The run's variant: config.json's `variant`, else the run id's suffix after the seed, else ""."""
    v = config.get("variant")
    if v:
        return str(v)
    m = _VARIANT.search(str(config.get("run", "")))
    return m.group(1) if m else ""


def configured_agents(config: dict[str, Any], roles: WorkflowRoles) -> float:
    """Parallel agents from the run's config: workflow_params (or workflows.<wf>) n_votes / max_subtasks, else
    config.json's parallel_role; NaN for a workflow without a parallel role."""
    if roles.parallel_role is None:
        return math.nan
    key = AGENT_KEYS.get(str(config.get("workflow")))
    for params in (
        config.get("workflow_params") or {},
        (config.get("workflows") or {}).get(config.get("workflow")) or {},
    ):
        if key and key in params:
            return float(params[key])
    return float(roles.parallel_agents)


def agent_facts(train: pd.DataFrame, config: dict[str, Any], roles: WorkflowRoles) -> dict[str, Any]:
    """n_agents (and where it came from), amplification_index and agent_cos_mean of the parallel role.

    Over the role's non-skipped steps: the index's median (a step whose agents' gradients nearly cancel
    has an index without bound, ~1e6, which would make the run's mean that one step) and the cosine's mean
    (bounded); NaN where the role or the columns are absent.
    """
    out: dict[str, Any] = {
        "variant": variant(config),
        "n_agents": math.nan,
        "n_agents_source": "",
        "amplification_index": math.nan,
        "agent_cos_mean": math.nan,
    }
    role = roles.parallel_role
    if role is None:
        return out
    rows = train[(train["role"] == role) & ~train["skipped"].astype(bool)]
    if "n_agents" in rows and rows["n_agents"].notna().any():
        # the agents the role actually ran (an orchestrator may plan fewer than max_subtasks): the step median
        out.update(
            n_agents=float(np.nanmedian(rows["n_agents"].to_numpy(dtype=float))), n_agents_source="train.parquet"
        )
    else:
        out.update(n_agents=configured_agents(config, roles), n_agents_source="config.json")
    for col, over_steps in (("amplification_index", np.nanmedian), ("agent_cos_mean", np.nanmean)):
        if col in rows:
            v = rows[col].to_numpy(dtype=float)
            out[col] = float(over_steps(v)) if (~np.isnan(v)).any() else math.nan
    return out
