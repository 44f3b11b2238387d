"""Claim 2: gains over the base depend on workflow x task x scale more than on the policy, with intervals.

Over the multi-agent runs (one row a run, primary split), each gain (`gain_peak`, `gain_terminal`) is decomposed
over the full factorial of the factors that vary (policy, workflow, task, scale, variant) and all their
interactions: sequential sums of squares (analysis/anova.py), policy's terms first within each order (where cells
are missing and the order matters, policy is credited first). The full factorial is the cell means, so the
residual is the spread of seeds within a cell.

A term's share is omega squared, (SS - df x MSE) / (SS_total + MSE): its sum of squares less what seed noise
alone puts into that many degrees of freedom, over the total variance: near 0 for a term without effect (and may
fall below). A raw share (`ss_share`, as `variance_decomposition` gives) credits each term with the noise in its
degrees of freedom, so under no effect at all it favours the group with more of them.

Groups: `workflow x task x scale terms` = the terms of those factors alone (their main effects and interactions);
`policy terms` = every term with policy (its main effect and its interactions: everything sharing changes);
`variant terms without policy`. The claim's statistic, `setting - policy`: the first group's share less the
second's. Intervals: percentile bootstrap that resamples the seeds within each cell (the design kept;
analysis/intervals.py `resample_within`), less the bootstrap's own bias (`_interval`).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd

from analysis.anova import NestedBases, nested_bases, sequential_ss, term_blocks
from analysis.intervals import LEVEL, resample_within
from analysis.names import CELL
from analysis.tables import GAINS, primary_rows

FACTORS = ["policy", "workflow", "task", "scale", "variant"]  # policy first: credited first where the order matters
SETTING = {"workflow", "task", "scale"}
SETTING_TERMS, POLICY, VARIANT = "workflow x task x scale terms", "policy terms", "variant terms without policy"
CLAIM = "setting - policy"
COLUMNS = ["measure", "kind", "term", "df", "ss_share", "estimate", "lo", "hi", "n_runs", "n_cells", "note"]
ONE_SEED = "one seed per cell: no within-cell spread to tell effects from noise"
NO_SPREAD = "every run has the same gain: no variance to decompose"


def _group(term: tuple[str, ...]) -> str:
    """The group row a term adds to (its name in the table)."""
    if "policy" in term:
        return POLICY
    return SETTING_TERMS if set(term) <= SETTING else VARIANT


def _shares(nested: NestedBases, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per term, each (..., terms), of responses y (..., n): omega squared, the raw SS share, and the share in the
    bootstrap's world (cell means the sample's, seed variance its MSE: SS / (SS_between + n x MSE)), which the
    resamples' omega squared estimate as the sample's estimates the true share."""
    ss, rss, total = sequential_ss(nested, y)
    mse = (rss / nested.df_residual if nested.df_residual else np.full_like(rss, np.nan))[..., None]
    df = np.asarray(nested.df, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        omega = (ss - df * mse) / (total[..., None] + mse)
        raw = ss / total[..., None]
        world = ss / ((total - rss)[..., None] + y.shape[-1] * mse)
    return omega, raw, world


def _interval(draws: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of the resamples' estimates less their bias in the bootstrap's world: each resample
    adds seed noise to cell means that hold the sample's already, so its omega squared is off by world - estimate
    (a plain percentile interval then covers a share without effect 8 times in 10 at 3 seeds, not 19 in 20)."""
    a = (1 - LEVEL) / 2
    with warnings.catch_warnings():  # a resample whose gains do not vary is NaN, left out; all NaN gives NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanquantile(draws - bias, a, axis=0), np.nanquantile(draws - bias, 1 - a, axis=0)


def _measure_rows(
    measure: str,
    blocks: list[tuple[tuple[str, ...], np.ndarray]],
    nested: NestedBases,
    y: np.ndarray,
    boot: np.ndarray | None,
) -> list[dict[str, Any]]:
    """The rows of one gain: each term, the groups, the claim's difference and the residual."""
    terms = [t for t, _ in blocks]
    groups = [g for g in (SETTING_TERMS, POLICY, VARIANT) if any(_group(t) == g for t in terms)]
    # the table's rows as weights over the terms: a term is itself, a group the sum of its terms, the claim a
    # difference of two groups
    weights = {" x ".join(t): np.eye(len(terms))[i] for i, t in enumerate(terms)}
    weights |= {g: np.array([_group(t) == g for t in terms], dtype=float) for g in groups}
    zero = np.zeros(len(terms))
    weights[CLAIM] = weights.get(SETTING_TERMS, zero) - weights.get(POLICY, zero)
    w = np.stack(list(weights.values()), axis=1)  # (terms, rows)
    omega, raw, world = _shares(nested, y)
    if boot is not None:
        lo, hi = _interval(_shares(nested, boot)[0] @ w, (world - omega) @ w)
    else:
        lo = hi = np.full(w.shape[1], np.nan)
    df = np.asarray(nested.df)
    out = []
    for i, name in enumerate(weights):
        kind = "term" if i < len(terms) else ("claim" if name == CLAIM else "group")
        out.append(
            {
                "measure": measure,
                "kind": kind,
                "term": name,
                "df": int(np.abs(w[:, i]) @ df),
                "ss_share": float(raw @ w[:, i]),
                "estimate": float(omega @ w[:, i]),
                "lo": float(lo[i]),
                "hi": float(hi[i]),
            }
        )
    out.append({"measure": measure, "kind": "residual", "term": "residual", "df": nested.df_residual})
    out[-1].update(ss_share=1 - float(raw.sum()), estimate=1 - float(omega.sum()), lo=np.nan, hi=np.nan)
    return out


def gain_factors(summary: pd.DataFrame, *, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Claim 2's table (see the module docstring): per gain, each term's, group's and the claim's share."""
    rows = primary_rows(summary) if len(summary) else pd.DataFrame(columns=[*CELL, *GAINS])
    rows = rows[rows["workflow"] != "single"].dropna(subset=GAINS).reset_index(drop=True)
    factors = [f for f in FACTORS if rows[f].nunique() > 1]
    if len(rows) < 2 or not factors:
        return pd.DataFrame(columns=COLUMNS)
    terms = term_blocks(rows, factors, len(factors))
    nested = nested_bases([block for _, block in terms], len(rows))
    cells = rows.groupby(CELL, sort=True).ngroup().to_numpy()
    no_seeds = nested.df_residual == 0
    rng = np.random.default_rng(seed)
    out = []
    for measure in GAINS:
        y = rows[measure].to_numpy(dtype=float)
        if np.ptp(y) == 0:  # nothing to decompose (and every share 0 / 0)
            out.append({"measure": measure, "kind": "residual", "term": "residual", "note": NO_SPREAD})
            continue
        boot = None if no_seeds else resample_within(y, cells, rng, n_boot)
        out += [{**r, "note": ONE_SEED if no_seeds else ""} for r in _measure_rows(measure, terms, nested, y, boot)]
    df = pd.DataFrame(out, columns=COLUMNS)
    df["n_runs"], df["n_cells"] = len(rows), cells.max() + 1
    return df
