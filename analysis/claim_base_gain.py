"""Claim 1: multi-agent RL improves on the base model, per cell, with seed intervals.

Per cell (workflow, task, scale, policy, variant) and measure, the mean over seeds of the run's gain and its
Student's t interval over those seeds (a cell has few seeds: 3 in the study). The measures (docs/evaluation.md):
- `gain_peak` = peak_acc - base_acc, `gain_terminal` = terminal_acc - base_acc, base_acc the step-0 eval;
- `gain_vs_single_peak` / `_terminal`: against the single-agent baseline of the same task, scale and seed
  (analysis/summary.py `add_single_baseline`), where the sweep has it.
Over the multi-agent cells (overall and per workflow), the claim's statistics:
- `share_above_zero`: the share of cells whose interval lies above zero, with its Wilson interval over cells (the
  cells compared with the same single-agent runs rise and fall with them, so against the single agent this
  interval, which counts cells as independent, is too narrow: the mean gain's is not);
- `mean_gain`: the mean of the cell means, with a percentile bootstrap that resamples each cell's seeds
  (analysis/intervals.py `resample_within`; against the single agent, its runs resampled in their own cells).
The peak is a maximum over evals: eval noise alone puts it above the step-0 eval, so `gain_peak` is biased
upward (its rows say so); the terminal gain and both gains against the single agent carry no such bias.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analysis.intervals import LEVEL, resample_within, t_mean_ci, wilson
from analysis.names import CELL, PLAIN, has_variants, workflow_rank
from analysis.tables import primary_rows

MEASURES = ["gain_peak", "gain_terminal", "gain_vs_single_peak", "gain_vs_single_terminal"]
VS_SINGLE = {"gain_vs_single_peak": "peak_acc", "gain_vs_single_terminal": "terminal_acc"}  # the accuracy compared
PEAK_NOTE = "a maximum over evals: above zero under eval noise alone"
COLUMNS = ["statistic", "measure", *CELL, "n", "estimate", "lo", "hi", "note"]
ALL = dict.fromkeys(CELL, "all")


def _note(measure: str) -> str:
    return PEAK_NOTE if measure == "gain_peak" else ""


def _cell_rows(rows: pd.DataFrame, measure: str) -> list[dict[str, Any]]:
    """One row per cell: mean over its seeds and the t interval (NaN with one seed)."""
    out = []
    for key, g in rows.groupby(CELL, sort=True):
        values = g[measure].to_numpy(dtype=float)
        lo, hi = t_mean_ci(values)
        out.append(
            {
                "statistic": "cell_gain",
                "measure": measure,
                **dict(zip(CELL, key)),
                "n": len(values),
                "estimate": float(values.mean()),
                "lo": lo,
                "hi": hi,
                "note": _note(measure),
            }
        )
    return out


def _averaging(groups: np.ndarray) -> np.ndarray:
    """(rows, groups) weights: column g averages group g's rows."""
    w = np.zeros((len(groups), groups.max() + 1))
    w[np.arange(len(groups)), groups] = 1.0
    return w / w.sum(axis=0)


def _deviations(values: np.ndarray, groups: np.ndarray, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    """(n_boot, groups): each group's mean in a resample of its rows (resample_within) less its mean."""
    w = _averaging(groups)
    return resample_within(values, groups, rng, n_boot) @ w - values @ w


def _mean_of_cells(
    rows: pd.DataFrame, singles: pd.DataFrame, measure: str, rng: np.random.Generator, n_boot: int
) -> tuple[float, float, float]:
    """The mean of the cell means and its percentile interval: each cell's seeds resampled on their own.

    A gain over the single agent is the run's accuracy less the single-agent run's of the same task, scale and
    seed, and one single-agent run is the baseline of many cells: the accuracies are resampled in their cells, the
    single agent's (`singles`) in its own, once a resample for every cell compared with it.
    """
    cells = rows.groupby(CELL, sort=True).ngroup().to_numpy()
    y = rows[measure].to_numpy(dtype=float)
    est = float((y @ _averaging(cells)).mean())
    if len(y) == cells.max() + 1:  # one seed a cell: nothing to resample
        return est, np.nan, np.nan
    if measure in VS_SINGLE:
        acc = rows[VS_SINGLE[measure]].to_numpy(dtype=float)
        ref = singles.groupby(["task", "scale"], sort=True).ngroup()
        index = {k: i for i, k in enumerate(singles.groupby(["task", "scale"], sort=True).groups)}
        of_cell = [index[k] for k in rows.groupby(CELL, sort=True)[["task", "scale"]].first().itertuples(index=False)]
        single_dev = _deviations(singles[VS_SINGLE[measure]].to_numpy(dtype=float), ref.to_numpy(), rng, n_boot)
        dev = _deviations(acc, cells, rng, n_boot) - single_dev[:, of_cell]
    else:
        dev = _deviations(y, cells, rng, n_boot)
    draws = est + dev.mean(axis=1)
    a = (1 - LEVEL) / 2
    return est, float(np.quantile(draws, a)), float(np.quantile(draws, 1 - a))


def _claim_rows(
    label: dict[str, str],
    rows: pd.DataFrame,
    singles: pd.DataFrame,
    cells: pd.DataFrame,
    measure: str,
    rng: np.random.Generator,
    n_boot: int,
) -> list[dict[str, Any]]:
    """The claim's two statistics over some multi-agent cells: share above zero (Wilson) and mean gain."""
    with_ci = cells[cells["lo"].notna()]
    above = int((with_ci["lo"] > 0).sum())
    lo, hi = wilson(above, len(with_ci))
    share = above / len(with_ci) if len(with_ci) else np.nan
    est, mlo, mhi = _mean_of_cells(rows, singles, measure, rng, n_boot)
    base = {"measure": measure, **label, "note": _note(measure)}
    return [
        {**base, "statistic": "share_above_zero", "n": len(with_ci), "estimate": share, "lo": lo, "hi": hi},
        {**base, "statistic": "mean_gain", "n": len(cells), "estimate": est, "lo": mlo, "hi": mhi},
    ]


def base_gain(summary: pd.DataFrame, *, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Claim 1's table (see the module docstring): the cells' rows of each measure, then the claim's statistics
    overall (every label `all`) and per workflow; a measure no run has (no single-agent baseline) has no rows."""
    rows = primary_rows(summary) if len(summary) else pd.DataFrame(columns=CELL)
    singles = rows[(rows["workflow"] == "single") & (rows["variant"] == PLAIN)] if len(rows) else rows
    rng = np.random.default_rng(seed)
    # the claim's rows pool every variant: labelled `all` only where there are variants to pool, so that a
    # matrix without variants writes the table without the axis (names.as_written)
    pooled = ALL if len(rows) and has_variants(rows) else {**ALL, "variant": PLAIN}
    out = []
    for measure in [m for m in MEASURES if m in rows]:
        have = rows[rows[measure].notna()]
        if "vs_single" in measure:
            have = have[have["workflow"] != "single"]
        cells = pd.DataFrame(_cell_rows(have, measure), columns=COLUMNS)
        out += cells.to_dict("records")
        multi = cells["workflow"] != "single"
        if not multi.any():
            continue
        agents = have[have["workflow"] != "single"]
        out += _claim_rows(pooled, agents, singles, cells[multi], measure, rng, n_boot)
        for wf, g in agents.groupby("workflow", sort=False):
            label = {**pooled, "workflow": wf}
            out += _claim_rows(label, g, singles, cells[cells["workflow"] == wf], measure, rng, n_boot)
    df = pd.DataFrame(out, columns=COLUMNS)
    return df.sort_values(
        ["measure", "statistic", "workflow"], key=lambda s: s.map(workflow_rank) if s.name == "workflow" else s
    ).reset_index(drop=True)
