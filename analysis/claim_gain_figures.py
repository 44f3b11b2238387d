"""The figures of claims 1 and 2, drawn from their tables (analysis/claim_base_gain.py, claim_gain_factors.py).

Each row is an estimate with its 95% interval (a cell's: Student's t over its seeds; a mean over cells and a
variance share: seed bootstrap); the terminal measure filled, the peak one hollow; a dashed line at no effect.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from analysis.empty_figure import empty_figure  # noqa: E402
from analysis.figure_data import MISSING, POLICY_COLOURS, Data, Grid, wf_name  # noqa: E402

BASE_MEASURES = (("gain_terminal", "gain_peak"), ("gain_vs_single_terminal", "gain_vs_single_peak"))
FACTOR_MEASURES = ("gain_terminal", "gain_peak")


def _empty(ax: plt.Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, **MISSING)
    ax.set_xticks([])
    ax.set_yticks([])


def _claim_table(data: Data, name: str) -> pd.DataFrame:
    t = (data.claims or {}).get(name, pd.DataFrame())
    return t.assign(variant=t["variant"].fillna("").astype(str)) if "variant" in t else t


def _row_label(r) -> str:
    """A cell as workflow/task/scale/policy[/variant]; a statistic over cells as its workflow or `all`."""
    if r.statistic != "cell_gain":
        return f"mean over {'all' if r.workflow == 'all' else wf_name(r.workflow)} cells"
    variant = getattr(r, "variant", "")
    return f"{wf_name(r.workflow)}/{r.task}/{r.scale}/{r.policy}" + (f"/{variant}" if variant else "")


def _rows(ax: plt.Axes, rows: pd.DataFrame, y: dict[str, float], offset: float, hollow: bool) -> None:
    """Each row's estimate and interval at its label's height; cells in their policy's colour, means in black."""
    for colour, g in rows.groupby(rows["policy"].map(POLICY_COLOURS).fillna("k"), sort=False):
        est, lo, hi = (g[c].to_numpy(dtype=float) for c in ("estimate", "lo", "hi"))
        err = [np.clip(np.nan_to_num(est - lo), 0, None), np.clip(np.nan_to_num(hi - est), 0, None)]
        ys = [y[_row_label(r)] + offset for r in g.itertuples()]
        face = "white" if hollow else colour
        ax.errorbar(est, ys, xerr=err, fmt="o", color=colour, mfc=face, ms=4, capsize=2, lw=1)


def _claim_title(t: pd.DataFrame, measure: str) -> str:
    over = t[(t["measure"] == measure) & (t["workflow"] == "all")].set_index("statistic")
    if not {"mean_gain", "share_above_zero"} <= set(over.index):
        return measure
    m, s = over.loc["mean_gain"], over.loc["share_above_zero"]
    return (
        f"{measure}: mean {m.estimate:.3f} [{m.lo:.3f}, {m.hi:.3f}]\n"
        f"cells above 0: {s.estimate:.0%} [{s.lo:.0%}, {s.hi:.0%}] of {int(s.n)}"
    )


def _gain_panel(ax: plt.Axes, t: pd.DataFrame, measures: tuple[str, str]) -> None:
    part = t[t["measure"].isin(measures) & (t["statistic"] != "share_above_zero")]
    if not len(part):
        _empty(ax, "no runs with this measure (a single-agent baseline of the same task and scale)")
        return
    ordered = part.sort_values("statistic", ascending=False, kind="stable")  # the means on top, then the cells
    labels = list(dict.fromkeys(_row_label(r) for r in ordered.itertuples()))
    y = {label: float(len(labels) - i) for i, label in enumerate(labels)}
    for offset, measure, hollow in ((0.15, measures[0], False), (-0.15, measures[1], True)):
        _rows(ax, part[part["measure"] == measure], y, offset, hollow)
    ax.axvline(0, color="0.4", ls="--", lw=0.8)
    ax.set_yticks(list(y.values()), labels, fontsize=7)
    ax.set_xlabel(f"{measures[0]} (filled), {measures[1]} (hollow)", fontsize=8)
    ax.set_title(_claim_title(t, measures[0]), fontsize=8)
    ax.grid(axis="x", alpha=0.3)


def claim_base_gain(data: Data, grid: Grid) -> plt.Figure:
    """Per cell, the gain over the step-0 eval (left) and over the single agent (right), terminal and peak, with
    seed intervals; on top the mean over cells (bootstrap), in the titles the share of cells above zero."""
    t = _claim_table(data, "base_gain")
    if not len(t):
        return empty_figure("Claim 1: gain of multi-agent RL over the base", "no analysed runs with gains to show")
    n = int((t["measure"] == "gain_terminal").sum()) if len(t) else 0  # the rows of the taller panel, about
    fig, axes = plt.subplots(1, 2, figsize=(12, 1.5 + 0.22 * max(n, 6)))
    for ax, measures in zip(axes, BASE_MEASURES):
        _gain_panel(ax, t, measures)
    fig.tight_layout()
    return fig


def claim_gain_factors(data: Data, grid: Grid) -> plt.Figure:
    """The share of the gains' variance (omega squared) of each factor group, each term and the claim's
    difference (workflow x task x scale terms - policy terms), with seed-bootstrap intervals."""
    t = _claim_table(data, "gain_factors")
    t = t[t["kind"] != "residual"] if len(t) else t
    order = (
        [r for k in ("claim", "group", "term") for r in dict.fromkeys(t.loc[t["kind"] == k, "term"])] if len(t) else []
    )
    if not len(t):
        return empty_figure("Claim 2: the gains' variance by factor", "no multi-agent runs with gains")
    fig, ax = plt.subplots(figsize=(8, 1.5 + 0.25 * max(len(order), 6)))
    y = {term: float(len(order) - i) for i, term in enumerate(order)}
    for offset, measure, hollow in ((0.15, FACTOR_MEASURES[0], False), (-0.15, FACTOR_MEASURES[1], True)):
        g = t[t["measure"] == measure]
        est, lo, hi = (g[c].to_numpy(dtype=float) for c in ("estimate", "lo", "hi"))
        err = [np.clip(np.nan_to_num(est - lo), 0, None), np.clip(np.nan_to_num(hi - est), 0, None)]
        ax.errorbar(
            est, [y[n] + offset for n in g["term"]], xerr=err, fmt="o", color="k", mfc="white" if hollow else "k"
        )
    ax.axvline(0, color="0.4", ls="--", lw=0.8)
    ax.set_yticks(list(y.values()), list(y), fontsize=7)
    ax.set_xlabel("share of the gain's variance (omega squared); gain_terminal filled, gain_peak hollow", fontsize=8)
    claim = t[(t["kind"] == "claim") & (t["measure"] == FACTOR_MEASURES[0])]
    if len(claim):
        c = claim.iloc[0]
        ax.set_title(f"{c.term} ({c.measure}): {c.estimate:.2f} [{c.lo:.2f}, {c.hi:.2f}]", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig
