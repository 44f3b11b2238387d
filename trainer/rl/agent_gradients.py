"""Per-agent gradients of a role with parallel agents (voter k, worker k): the amplification mechanism.

With `training.agent_gradients`, update.py splits a role's micro-batches per agent instance, so the
GradientRecorder's leaf hooks see one agent's gradient per backward pass (no extra backward pass) and
sum it per (role, agent). From those sums, per role:

- n_agents: the agent instances with rows this step (1 for a role without parallel agents);
- agent_grad_norms: ||g_k|| of each agent k, in agent order;
- amplification_index: sum_k ||g_k|| / ||sum_k g_k|| (1 when the agents' gradients point the same
  way, larger as they cancel); NaN with fewer than 2 agents or a zero sum;
- agent_cos_mean: the mean cosine over pairs of agents whose gradients are non-zero; NaN without a pair.

The split changes the float summation order of the update (and so a run's trajectory in its last
bits), which is why it is a setting, off by default: runs without it keep their logs bit for bit.
"""

from __future__ import annotations

import math
from typing import Any

import torch

AGENT_COLUMNS = ("n_agents", "agent_grad_norms", "amplification_index", "agent_cos_mean")


def row_agent(role: str, agent: int, parallel_role: str | None) -> int:
    """The agent index a turn trains as: its instance in the workflow's parallel role, else 0 (an
    eval_opt round, say, is the same agent acting again, not a parallel one)."""
    return agent if role == parallel_role else 0


def agent_metrics(grads: list[torch.Tensor]) -> dict[str, Any]:
    """The per-agent metrics of one role from its agents' flat gradients (one vector per agent).

    Squares and products are summed as the per-role metrics sum them (`.sum()`): torch's float32
    `norm()` on CPU drifts by ~1e-5 relative over a million elements, `.sum()` does not."""
    norms = [math.sqrt(float(g.pow(2).sum())) for g in grads]
    total = math.sqrt(float(torch.stack(grads).sum(0).pow(2).sum())) if grads else 0.0
    amp = sum(norms) / total if len(grads) > 1 and total > 0 else math.nan
    cos = [
        float((grads[i] * grads[j]).sum()) / (norms[i] * norms[j])
        for i in range(len(grads))
        for j in range(i + 1, len(grads))
        if norms[i] > 0 and norms[j] > 0
    ]
    return {
        "n_agents": len(grads),
        "agent_grad_norms": norms,
        "amplification_index": amp,
        "agent_cos_mean": sum(cos) / len(cos) if cos else math.nan,
    }


def role_agent_metrics(
    agent_grads: dict[tuple[str, int], list[torch.Tensor | None]], shapes: list[torch.Size]
) -> dict[str, dict[str, Any]]:
    """agent_metrics per role from the recorder's per-(role, agent) sums (a parameter an agent's
    rows gave no gradient counts as zeros, so every agent's vector lines up)."""
    by_role: dict[str, list[tuple[int, torch.Tensor]]] = {}
    for (role, agent), gs in agent_grads.items():
        device = next(g.device for g in gs if g is not None)
        flat = torch.cat(
            [(g if g is not None else torch.zeros(s, device=device)).flatten().float() for g, s in zip(gs, shapes)]
        )
        by_role.setdefault(role, []).append((agent, flat))
    return {role: agent_metrics([g for _, g in sorted(pairs, key=lambda p: p[0])]) for role, pairs in by_role.items()}


def agent_columns(stats: dict[str, Any]) -> dict[str, Any]:
    """The train.parquet columns of a role's update stats (a role without rows: no agents, NaN)."""
    return {
        "n_agents": int(stats.get("n_agents", 0)),
        "agent_grad_norms": list(stats.get("agent_grad_norms", [])),
        "amplification_index": float(stats.get("amplification_index", math.nan)),
        "agent_cos_mean": float(stats.get("agent_cos_mean", math.nan)),
    }
