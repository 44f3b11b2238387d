"""Claim 5: parallel same-role agents amplify that role's gradient under Isolated-Policy, and the amplification
goes with the terminal drop.

Per run (summary rows, from analysis/agents.py): the parallel role's agents `n_agents` (the dose: variants set
n_votes / max_subtasks) and its `amplification_index` = sum_k ||g_k|| / ||sum_k g_k|| (train.parquet; the
median over the run's steps, analysis/agents.py);
the terminal drop = peak_acc - terminal_acc. Long format, one statistic a row:
- `mean_index`: mean index per workflow, policy and n_agents (bootstrap over runs);
- `slope`: index per added agent (least squares over runs), per workflow and policy, and `isolated - shared`;
- `corr_drop`: Pearson correlation of the index with the terminal drop, per workflow and policy (`all`: both),
  and over every workflow.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from analysis.intervals import bootstrap_mean_ci, bootstrap_stat_ci, bootstrap_two_groups, pearson, slope
from analysis.tables import primary_rows

COLUMNS = ["statistic", "workflow", "policy", "n_agents", "n_runs", "estimate", "lo", "hi", "note"]
NO_INDEX = (
    "not measured: train.parquet has no amplification_index (runs without training.agent_gradients); "
    "set training.agent_gradients: true to log each parallel agent's gradient, then rerun the analysis"
)


def agent_runs(summary: pd.DataFrame) -> pd.DataFrame:
    """Runs with a parallel role and a measured index: workflow, policy, n_agents, index, terminal drop."""
    rows = primary_rows(summary)
    if "amplification_index" not in rows or "n_agents" not in rows:
        return pd.DataFrame(columns=["workflow", "policy", "n_agents", "index", "drop"])
    rows = rows[rows["n_agents"].notna() & rows["amplification_index"].notna()]
    return pd.DataFrame(
        {
            "workflow": rows["workflow"],
            "policy": rows["policy"],
            "n_agents": rows["n_agents"].astype(float),
            "index": rows["amplification_index"],
            "drop": rows["peak_acc"] - rows["terminal_acc"],
        }
    ).reset_index(drop=True)


def _row(
    statistic: str, wf: str, policy: str, n_agents: Any, n: int, est: float, ci: tuple[float, float], note: str = ""
) -> dict[str, Any]:
    return {
        "statistic": statistic,
        "workflow": wf,
        "policy": policy,
        "n_agents": n_agents,
        "n_runs": n,
        "estimate": est,
        "lo": ci[0],
        "hi": ci[1],
        "note": note,
    }


def _by_run(g: pd.DataFrame, fn, rng: np.random.Generator, n_boot: int, x: str, y: str) -> tuple[float, tuple]:
    xs, ys = g[x].to_numpy(dtype=float), g[y].to_numpy(dtype=float)
    return fn(xs, ys), bootstrap_stat_ci(lambda i: fn(xs[i], ys[i]), len(g), rng, n_boot)


def _slope_diff(iso: pd.DataFrame, sh: pd.DataFrame, rng: np.random.Generator, n_boot: int) -> tuple[float, tuple]:
    xi, yi = iso["n_agents"].to_numpy(dtype=float), iso["index"].to_numpy(dtype=float)
    xs, ys = sh["n_agents"].to_numpy(dtype=float), sh["index"].to_numpy(dtype=float)
    est = slope(xi, yi) - slope(xs, ys)
    return est, bootstrap_two_groups(
        lambda a, b: slope(xi[a], yi[a]) - slope(xs[b], ys[b]), len(xi), len(xs), rng, n_boot
    )


def amplification_dose(summary: pd.DataFrame, *, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Claim 5's table (see the module docstring); one `note` row when no run logs the index."""
    runs = agent_runs(summary) if len(summary) else pd.DataFrame()
    if not len(runs):
        return pd.DataFrame(
            [_row("none", "all", "all", "", 0, math.nan, (math.nan, math.nan), NO_INDEX)], columns=COLUMNS
        )
    rng = np.random.default_rng(seed)
    out = []
    for (wf, pol, k), g in runs.groupby(["workflow", "policy", "n_agents"], sort=True):
        out.append(
            _row(
                "mean_index",
                wf,
                pol,
                f"{k:g}",
                len(g),
                float(g["index"].mean()),
                bootstrap_mean_ci(g["index"].to_numpy(), rng, n_boot),
            )
        )
    for wf, w in runs.groupby("workflow", sort=True):
        for pol, g in w.groupby("policy", sort=True):
            est, ci = _by_run(g, slope, rng, n_boot, "n_agents", "index")
            out.append(_row("slope", wf, pol, "per agent", len(g), est, ci))
        iso, sh = w[w["policy"] == "isolated"], w[w["policy"] == "shared"]
        if len(iso) and len(sh):
            est, ci = _slope_diff(iso, sh, rng, n_boot)
            out.append(_row("slope", wf, "isolated - shared", "per agent", len(w), est, ci))
    for wf, w in [*runs.groupby("workflow", sort=True), ("all", runs)]:
        for pol, g in [*w.groupby("policy", sort=True), ("all", w)]:
            est, ci = _by_run(g, pearson, rng, n_boot, "index", "drop")
            out.append(_row("corr_drop", wf, pol, "all", len(g), est, ci))
    return pd.DataFrame(out, columns=COLUMNS)
