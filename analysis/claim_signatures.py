"""Claim 4: failure signatures as rates over every eval episode, Shared vs Isolated, with intervals.

The trainer's eval diagnostics are means over all of an eval's episodes (`n` in eval.parquet), not over the
few episodes samples.parquet keeps: a rate r at an eval of n episodes counts r x n episodes (r x n x
mean_iterations judged rounds for the evaluator's accept rate, which is per round). A run's rate is pooled
over its last `terminal_k` evals (where `terminal_acc` is measured), and a policy's over its runs.
`vote_agreement` is a mean over episodes of each episode's share of agreeing voter pairs, not a 0/1 per episode:
its Wilson and Newcombe intervals (which treat episodes as Bernoulli) are then conservative; the run bootstrap
(`diff_runs_*`) assumes neither.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis.intervals import bootstrap_two_groups, newcombe, wilson


@dataclass(frozen=True)
class RateSpec:
    """A failure signature read as a rate: `column` of eval.parquet (1 - column when `invert`)."""

    signature: str
    column: str
    workflow: str | None  # the workflow it belongs to (None: every workflow)
    invert: bool = False
    rounds: str | None = None  # an eval column counting units per episode (the rate is per unit)
    missing: str = ""  # why the trainer may not log it


RATES = [
    RateSpec("evaluator_always_accepts", "evaluator_accept_rate", "eval_opt", rounds="mean_iterations"),
    RateSpec("evaluator_always_rejects", "evaluator_accept_rate", "eval_opt", invert=True, rounds="mean_iterations"),
    RateSpec("aggregator_same_slot", "top_slot_share", "voting"),
    RateSpec(
        "aggregator_ignores_majority",
        "majority_ignored_rate",
        "voting",
        missing="the trainer's eval does not log it; signatures.py estimates it from the sampled episodes only",
    ),
    RateSpec("voters_identical", "vote_agreement", "voting"),
    RateSpec(
        "orchestrator_stops_decomposing",
        "single_subtask_rate",
        "orch_workers",
        missing="the trainer's eval logs subtasks_mean (a mean, not a rate of episodes)",
    ),
    RateSpec("answers_stop_parsing", "final_answer_parse_rate", None, invert=True),
]
COLUMNS = [
    "workflow",
    "task",
    "signature",
    "column",
    "runs_shared",
    "episodes_shared",
    "rate_shared",
    "rate_shared_lo",
    "rate_shared_hi",
    "runs_isolated",
    "episodes_isolated",
    "rate_isolated",
    "rate_isolated_lo",
    "rate_isolated_hi",
    "diff",
    "diff_lo",
    "diff_hi",
    "diff_runs_lo",
    "diff_runs_hi",
    "note",
]


def run_counts(curves: pd.DataFrame, spec: RateSpec, terminal_k: int) -> pd.DataFrame:
    """Per run: episodes (or units) k showing the signature and n seen, over its last `terminal_k` evals."""
    if spec.column not in curves:
        return pd.DataFrame(columns=["run", "workflow", "task", "policy", "k", "n"])
    c = curves[curves["primary"].astype(bool)] if "primary" in curves else curves
    c = c.sort_values("step").groupby("run", sort=False).tail(terminal_k)
    rate = c[spec.column].astype(float)
    units = c["n"].astype(float) * (c[spec.rounds].astype(float) if spec.rounds and spec.rounds in c else 1.0)
    frame = c[["run", "workflow", "task", "policy"]].assign(
        k=((1 - rate) if spec.invert else rate) * units, n=units.where(rate.notna(), 0.0)
    )
    frame["k"] = frame["k"].fillna(0.0)
    return frame.groupby(["run", "workflow", "task", "policy"], as_index=False)[["k", "n"]].sum()


def _pooled_diff(iso: pd.DataFrame, sh: pd.DataFrame, rng: np.random.Generator, n_boot: int) -> tuple[float, float]:
    """Run-level bootstrap of the pooled rate difference: resample runs within each policy (between-run spread)."""
    ki, ni, ks, ns = (a.to_numpy(dtype=float) for a in (iso["k"], iso["n"], sh["k"], sh["n"]))

    def stat(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return ki[a].sum(axis=1) / ni[a].sum(axis=1) - ks[b].sum(axis=1) / ns[b].sum(axis=1)

    return bootstrap_two_groups(stat, len(ki), len(ks), rng, n_boot)


def _rate_row(label: dict[str, Any], counts: pd.DataFrame, rng: np.random.Generator, n_boot: int) -> dict[str, Any]:
    row = dict(label, note="")
    parts = {p: counts[(counts["policy"] == p) & (counts["n"] > 0)] for p in ("shared", "isolated")}
    for p, g in parts.items():
        k, n = float(g["k"].sum()), float(g["n"].sum())
        lo, hi = wilson(k, n)
        row.update(
            {
                f"runs_{p}": len(g),
                f"episodes_{p}": n,
                f"rate_{p}": k / n if n else math.nan,
                f"rate_{p}_lo": lo,
                f"rate_{p}_hi": hi,
            }
        )
    i, s = parts["isolated"], parts["shared"]
    d, lo, hi = newcombe(i["k"].sum(), i["n"].sum(), s["k"].sum(), s["n"].sum())
    rlo, rhi = _pooled_diff(i, s, rng, n_boot)
    row.update(diff=d, diff_lo=lo, diff_hi=hi, diff_runs_lo=rlo, diff_runs_hi=rhi)
    return row


def signature_rates(
    summary: pd.DataFrame, curves: pd.DataFrame, *, terminal_k: int = 3, n_boot: int = 2000, seed: int = 0
) -> pd.DataFrame:
    """Claim 4: per workflow, task and signature, its rate over all terminal eval episodes per policy (Wilson
    intervals) and Isolated minus Shared (Newcombe interval over episodes; diff_runs_*: bootstrap over runs).

    A signature whose column eval.parquet lacks is one row saying so (`note`), not an error.
    """
    if not len(curves) or not len(summary):
        return pd.DataFrame(columns=COLUMNS)
    runs = set(summary["run"])
    curves = curves[curves["run"].isin(runs)]
    workflows = sorted(set(curves["workflow"]))
    rng = np.random.default_rng(seed)
    out = []
    for spec in RATES:
        for wf in [w for w in workflows if spec.workflow in (None, w)]:
            part = curves[curves["workflow"] == wf]
            counts = run_counts(part.dropna(axis=1, how="all"), spec, terminal_k)
            if not len(counts):
                out.append(
                    {
                        "workflow": wf,
                        "task": "all",
                        "signature": spec.signature,
                        "column": spec.column,
                        "note": f"not measured: eval.parquet has no {spec.column}"
                        + (f" ({spec.missing})" if spec.missing else ""),
                    }
                )
                continue
            for task, g in counts.groupby("task", sort=True):
                out.append(
                    _rate_row(
                        {"workflow": wf, "task": task, "signature": spec.signature, "column": spec.column},
                        g,
                        rng,
                        n_boot,
                    )
                )
    return pd.DataFrame(out, columns=COLUMNS)
