"""The early-warning figures: each detector's first onset per run, against the cliff (runs with one) or
alone (runs without one: false alarms); and the calibration's held-out recall against false alarms."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from analysis.empty_figure import empty_figure  # noqa: E402
from analysis.figure_data import POLICY_COLOURS, Data, Grid  # noqa: E402
from trainer.contract.rundir import EARLY_WARNING_DETECTORS  # noqa: E402


def early_warnings(data: Data, grid: Grid) -> plt.Figure:
    """Left: onset step minus cliff step per detector (left of the dashed line: warned before the cliff);
    right: onset steps on runs without a cliff. One dot per run and detector, coloured by policy."""
    w = data.warnings
    if w is None or not len(w):
        return empty_figure(
            "Early warnings: first onset per run and detector",
            "No early warning fired on any analysed run: no onset to draw.",
        )
    fig, (ax_c, ax_n) = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    y = {d: i for i, d in enumerate(EARLY_WARNING_DETECTORS)}
    jitter = np.random.default_rng(0)
    for ax, cliffed in ((ax_c, True), (ax_n, False)):
        part = w[w["cliff_step"].notna() == cliffed]
        if len(part):
            x = (part["step"] - part["cliff_step"]) if cliffed else part["step"]
            ys = part["detector"].map(y).to_numpy(dtype=float) + jitter.uniform(-0.15, 0.15, len(part))
            ax.scatter(x, ys, c=[POLICY_COLOURS.get(p, "0.4") for p in part["policy"]], s=18, alpha=0.8)
        else:
            ax.text(0.5, 0.5, "no warnings", transform=ax.transAxes, ha="center", color="0.5")
        ax.set_yticks(range(len(y)), list(y))
        ax.grid(axis="x", alpha=0.3)
    ax_c.axvline(0, color="k", ls="--", lw=1)
    ax_c.set_xlabel("first onset - cliff step (steps; < 0: warned before the cliff)")
    ax_c.set_title("runs with a cliff")
    ax_n.set_xlabel("first onset step")
    ax_n.set_title("runs without a cliff (false alarms)")
    fig.tight_layout()
    return fig


def calibration_figure(
    table: pd.DataFrame, goal_recall: float, goal_false_alarm: float, lead_evals: float
) -> plt.Figure:
    """Held-out recall (cliffs warned `lead_evals` evals ahead) against the false-alarm rate of the healthy
    runs, one point per detector with its 95% Wilson intervals on both axes; the goal's box shaded."""
    fig, ax = plt.subplots(figsize=(9, 5))
    ax.add_patch(
        plt.Rectangle((0, goal_recall), goal_false_alarm, 1 - goal_recall, color="tab:green", alpha=0.15, lw=0)
    )
    ax.text(goal_false_alarm / 2, 1.0, "goal", ha="center", va="bottom", color="tab:green", fontsize=9)
    colours = plt.get_cmap("tab20")(np.linspace(0, 1, max(len(table), 1)))
    for (_, r), c in zip(table.iterrows(), colours):
        if not (np.isfinite(r["recall"]) and np.isfinite(r["false_alarm_rate"])):
            continue
        x, y = r["false_alarm_rate"], r["recall"]
        if not np.isfinite(r["threshold"]):  # never warns: a mark at the origin, no intervals
            ax.plot(x, y, "x", color=c, alpha=0.7, label=f"{r['detector']} (no threshold)")
            continue
        # an interval's bound may sit a rounding error inside its value (Wilson at 0 of n): no negative bar
        xerr = np.maximum([[x - r["false_alarm_lo"]], [r["false_alarm_hi"] - x]], 0)
        yerr = np.maximum([[y - r["recall_lo"]], [r["recall_hi"] - y]], 0)
        ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt="o", color=c, capsize=3, alpha=0.85, label=r["detector"])
    ax.set_xlim(-0.03, 1.03)
    ax.set_ylim(-0.03, 1.08)
    ax.set_xlabel("held-out healthy runs falsely warned (share)")
    ax.set_ylabel(f"held-out cliffs warned >= {lead_evals:g} evals ahead (share)")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(
            fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="95% Wilson intervals", title_fontsize=7
        )
    fig.tight_layout()
    return fig
