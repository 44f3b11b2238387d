"""Role-level gradient dynamics: capture of a shared policy by one role, amplification of parallel agents.

Both read train.parquet's `grad_norm` (a role's contribution to its policy's gradient, pre-clip) and
`grad_sq_share` (its share of that policy's squared gradient).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd


def role_steps(train: pd.DataFrame) -> pd.DataFrame:
    """Per role and step: gradient norm, squared share, turns; skipped updates have no gradient (NaN)."""
    out = train[["step", "role", "policy", "n_turns", "grad_norm", "grad_sq_share"]].copy()
    skipped = train["skipped"].to_numpy(dtype=bool)
    out.loc[skipped, ["grad_norm", "grad_sq_share"]] = np.nan
    return out


def _slope_per_100_steps(steps: np.ndarray, values: np.ndarray) -> float:
    ok = ~np.isnan(values)
    if ok.sum() < 3 or np.ptp(steps[ok]) == 0:
        return math.nan
    return float(np.polyfit(steps[ok], values[ok], 1)[0] * 100)


CAPTURE_SHARE = 0.6  # config.yaml's analysis.capture_share when it is not given


def capture(
    train: pd.DataFrame,
    *,
    cliff_step: float = math.nan,
    capture_share: float = CAPTURE_SHARE,
    trend_fraction: float = 0.2,
    smoothing_steps: int = 10,
) -> dict[str, Any]:
    """Which role captures a shared policy, how much, from when, and the trend of its share before a cliff.

    capture_index: the dominant role's share of the squared gradient over the last quarter of training
    (the dominant role: the largest mean share there). capture_step: the first step from which that role's
    share (a trailing mean over `smoothing_steps`) stays >= `capture_share` to the end. capture_trend: the
    slope, per 100 steps, of its share over the `trend_fraction` of training before the cliff step.
    Only policies that more than one role updates count; otherwise every value is NaN/None.
    """
    nan = math.nan
    out = {"capture_role": None, "capture_index": nan, "capture_step": nan, "capture_trend": nan}
    multi = train.groupby("policy")["role"].nunique()
    policies = multi[multi > 1].index
    if not len(policies):
        return out
    rows = train[train["policy"] == policies[0]]  # shared: one policy for all roles
    share = rows.pivot_table(index="step", columns="role", values="grad_sq_share", aggfunc="mean").sort_index()
    share = share.where(
        ~rows.pivot_table(index="step", columns="role", values="skipped", aggfunc="max")
        .reindex_like(share)
        .fillna(False)
        .astype(bool)
    )
    if share.isna().all().all():
        return out
    steps = share.index.to_numpy(dtype=float)
    last = share[steps >= steps.min() + 0.75 * (steps.max() - steps.min())]
    role = str(last.mean().idxmax())
    out["capture_role"] = role
    out["capture_index"] = float(last[role].mean())
    smoothed = share[role].rolling(smoothing_steps, min_periods=1).mean().to_numpy()
    above = np.where(np.isnan(smoothed), True, smoothed >= capture_share)
    if above[-1]:
        # the last run of steps above the threshold that reaches the end
        below = np.flatnonzero(~above)
        first = int(below[-1]) + 1 if len(below) else 0
        out["capture_step"] = float(steps[first])
    if not math.isnan(cliff_step):
        window = trend_fraction * (steps.max() - steps.min())
        pre = (steps <= cliff_step) & (steps >= cliff_step - window)
        out["capture_trend"] = _slope_per_100_steps(steps[pre], share[role].to_numpy()[pre])
    return out


def amplification(train: pd.DataFrame, group_role: str | None, nominal_agents: float) -> pd.DataFrame:
    """Per role: mean gradient norm, parallel agents per episode, and its ratio to the run's single-agent roles.

    `group_role`: the workflow's role with parallel agents on one prompt (voters, workers), or None;
    `nominal_agents`: their configured number (n_votes, max_subtasks), both from the run's config.json.
    parallel_agents: the role's turns per step over those of a single-agent role (one turn per episode),
    so the count realised in training (orchestrators may plan fewer subtasks than max_subtasks).
    amplification: the role's mean gradient norm over the geometric mean of the single-agent roles' (1 for
    a single-agent role of a one-role run).
    """
    rs = role_steps(train)
    by_role = rs.groupby("role").agg(grad_norm=("grad_norm", "mean"), n_turns=("n_turns", "mean"))
    singles = [r for r in by_role.index if r != group_role]
    # a single-agent role has one turn per episode (eval_opt's sequential revisions are not parallel agents)
    ref_turns = by_role.loc[singles, "n_turns"].min() if singles else math.nan
    ref_norm = float(np.exp(np.log(by_role.loc[singles, "grad_norm"]).mean())) if singles else math.nan
    rows = []
    for role, r in by_role.iterrows():
        is_group = role == group_role
        rows.append(
            {
                "role": role,
                "group_role": is_group,
                "grad_norm_mean": float(r["grad_norm"]),
                "parallel_agents": float(r["n_turns"] / ref_turns) if is_group and ref_turns else 1.0,
                "nominal_agents": float(nominal_agents) if is_group else 1.0,
                "amplification": float(r["grad_norm"] / ref_norm) if ref_norm else math.nan,
            }
        )
    return pd.DataFrame(rows)
