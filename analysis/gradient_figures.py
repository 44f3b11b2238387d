"""The gradient figures: per-role gradient norms and amplification (Isolated), capture (Shared)."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker as mticker  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from analysis.empty_figure import NO_RUN, empty_figure  # noqa: E402
from analysis.figure_data import (  # noqa: E402
    MISSING,
    POLICY_COLOURS,
    Data,
    Grid,
    legend_handles,
    role_colour,
    roles_in,
    select,
    wf_name,
)

NO_ISOLATED = "No Isolated-Policy run has been analysed: no per-role gradient norm to draw."
NO_SHARED = "No Shared-Policy run of a multi-agent workflow has been analysed: no capture to draw."


def _group_role(amp: pd.DataFrame) -> str | None:
    """The role with parallel agents in a workflow's amplification rows (from its runs' config.json), or None."""
    group = amp[amp["group_role"].astype(bool)]["role"] if len(amp) else []
    return str(group.iloc[0]) if len(group) else None


def _log_y(ax: plt.Axes) -> None:
    """A log y-axis with plain tick labels (0.5, 1, 2, 3, 5, ...), dense enough for a range under a decade."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(mticker.LogLocator(subs=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0)))
    ax.yaxis.set_major_formatter(mticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(mticker.NullFormatter())


def _binned_mean(g: pd.DataFrame, value: str, bins: int = 50) -> pd.Series:
    """Mean of `value` per step over runs, on at most `bins` step bins (keeps lines readable and fast);
    empty where `g` is (e.g. a role whose every step had no gradient: all its rewards tied)."""
    if g.empty:
        return pd.Series(dtype=float)
    steps = g["step"].to_numpy()
    width = max(int(math.ceil((steps.max() - steps.min() + 1) / bins)), 1)
    b = (steps - 1) // width * width + width / 2
    return g.groupby(b)[value].mean()


def _norms_panel(ax: plt.Axes, g: pd.DataFrame, wf: str, first: bool) -> None:
    """Per-role gradient norm over training under Isolated (mean over runs; log scale where it spreads the lines)."""
    ax.set_title(f"{wf_name(wf)}: grad norm (isolated)", fontsize=9)
    if not len(g):
        ax.text(0.5, 0.5, "missing", transform=ax.transAxes, **MISSING)
    for role in roles_in(g):
        m = _binned_mean(select(g, role=role).dropna(subset=["grad_norm"]), "grad_norm")
        ax.plot(m.index, m.values, color=role_colour(role), lw=1.3, label=role)
    lo, hi = ax.get_ylim()
    if len(g) and lo > 0 and hi / lo > 2:  # log only where it spreads the lines; narrow ranges stay linear
        _log_y(ax)
    if len(g):
        ax.legend(fontsize=7, loc="upper left")
    ax.set_xlabel("training step")
    ax.xaxis.set_major_locator(mticker.MaxNLocator(integer=True))  # steps are whole numbers
    if first:
        ax.set_ylabel("gradient norm (pre-clip)")
    ax.grid(alpha=0.3)


def _amplification_panel(ax: plt.Axes, amp: pd.DataFrame, wf: str, grid: Grid) -> bool:
    """A parallel role's gradient norm over the single-agent roles' against parallel agents, per policy and scale.
    False (the panel turned off) where the workflow has no parallel same-role agents."""
    group = _group_role(amp)
    if group is None and len(amp):
        ax.text(0.5, 0.5, f"{wf_name(wf)}:\nno parallel same-role agents", transform=ax.transAxes, **MISSING)
        ax.set_axis_off()
        return False
    ax.axhline(1.0, color="0.4", lw=0.8, ls=":")
    # a ratio: log scale, so x3 above 1 and /3 below it look alike, and a near-zero reference
    # norm (a role whose output turned deterministic) does not flatten every other point
    _log_y(ax)
    if not len(amp):
        ax.text(0.5, 0.5, "missing", transform=ax.transAxes, **MISSING)
    else:
        a = amp[amp["group_role"].astype(bool)]
        for policy in grid.policies:
            for scale in grid.scales:
                p = select(a, policy=policy, scale=scale)
                if len(p):
                    ax.scatter(
                        p["parallel_agents"],
                        p["amplification"],
                        color=POLICY_COLOURS[policy],
                        marker=grid.markers[scale],
                        s=22,
                        alpha=0.75,
                    )
            p = select(a, policy=policy)
            if len(p) > 1 and p["parallel_agents"].nunique() > 1:
                m = p.groupby("parallel_agents")["amplification"].mean()
                ax.plot(m.index, m.values, color=POLICY_COLOURS[policy], lw=1, alpha=0.7)
        ax.set_title(f"{wf_name(wf)}: {group}s vs parallel agents", fontsize=9)
        ax.legend(handles=legend_handles(grid), fontsize=6, loc="upper left")
    ax.set_xlabel("parallel agents per prompt")
    ax.grid(alpha=0.3)
    return True


# 5 -------------------------------------------------------------------------------------------------------------
def isolated_gradients(data: Data, grid: Grid) -> plt.Figure:
    """Top: per-role gradient norm over training under Isolated (mean over runs, log scale if wide), one panel per workflow.
    Bottom: amplification (a same-role group's gradient norm over the single-agent roles') against parallel agents."""
    title = "Role-level gradients under Isolated-Policy; amplification of parallel agents"
    g_iso = select(data.gradients, policy="isolated")
    if not len(g_iso) and not len(data.amplification):
        return empty_figure(title, NO_RUN if not len(data.summary) else NO_ISOLATED)
    wfs = grid.multi or grid.workflows
    fig, axes = plt.subplots(2, len(wfs), figsize=(3.8 * len(wfs), 6.4), squeeze=False)
    previous_on = False
    for i, wf in enumerate(wfs):
        _norms_panel(axes[0][i], select(g_iso, workflow=wf), wf, first=i == 0)
        on = _amplification_panel(axes[1][i], select(data.amplification, workflow=wf), wf, grid)
        if on and not previous_on:  # the first panel shown in the row carries the label
            axes[1][i].set_ylabel("amplification\n(norm / single-agent roles')")
        previous_on = on
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def _capture_panel(ax: plt.Axes, g: pd.DataFrame, runs: pd.DataFrame, capture_share: float) -> list[str]:
    """Each role's share of a shared policy's squared gradient, stacked; the median capture step marked, over the
    runs the most frequent capturer took. Returns the roles drawn."""
    caught = runs[runs["capture_step"].notna()] if "capture_step" in runs else runs.iloc[0:0]
    label = "no capture"
    if len(caught):  # average the runs the most frequent capturer took, so capture is not averaged away
        role = caught["capture_role"].mode().iloc[0]
        caught = caught[caught["capture_role"] == role]
        g = g[g["run"].isin(set(caught["run"]))]
        ax.axvline(float(caught["capture_step"].median()), color="black", lw=1.2, ls="--")
        label = f"captured by {role}: {len(caught)}/{runs['run'].nunique()} runs (shown)"
    roles = roles_in(g)
    lines = {r: _binned_mean(select(g, role=r).dropna(subset=["grad_sq_share"]), "grad_sq_share") for r in roles}
    frame = pd.DataFrame(lines).sort_index().fillna(0.0)
    ax.stackplot(frame.index, frame.T.values, colors=[role_colour(x) for x in roles], alpha=0.85)
    ax.axhline(capture_share, color="black", lw=0.7, ls=":")
    box = dict(fc="white", ec="none", alpha=0.8, pad=1.5)
    ax.text(0.02, 0.96, label, fontsize=6.5, ha="left", va="top", transform=ax.transAxes, bbox=box)
    ax.margins(x=0)
    return roles


# 6 -------------------------------------------------------------------------------------------------------------
def shared_capture(data: Data, grid: Grid) -> plt.Figure:
    """Per-role share of the shared policy's squared gradient over training (stacked, mean over runs), rows =
    workflow, columns = task; the median capture step marked, with the role that captures most runs."""
    title = "Who takes the gradient of a Shared policy (mean over the runs its most frequent capturer took)"
    g_sh = select(data.gradients, policy="shared")
    if not len(g_sh):
        return empty_figure(title, NO_RUN if not len(data.summary) else NO_SHARED)
    wfs = grid.multi or grid.workflows
    nr, nc = len(wfs), len(grid.tasks)
    fig, axes = plt.subplots(nr, nc, figsize=(4.2 * nc + 1.6, 2.3 * nr + 0.6), squeeze=False, sharex=True, sharey=True)
    s_sh = select(data.summary, policy="shared")
    all_roles: list[str] = []
    for r, wf in enumerate(wfs):
        for c, task in enumerate(grid.tasks):
            ax = axes[r][c]
            ax.set_title(f"{wf_name(wf)} / {task}", fontsize=9)
            ax.set_ylim(0, 1)
            if r == nr - 1:
                ax.set_xlabel("training step")
                ax.xaxis.set_major_locator(mticker.MaxNLocator(integer=True))  # steps are whole numbers
            if c == 0:
                ax.set_ylabel("share of squared grad")
            g = select(g_sh, workflow=wf, task=task)
            if not len(g):
                ax.text(0.5, 0.5, "missing", transform=ax.transAxes, **MISSING)
                continue
            roles = _capture_panel(ax, g, select(s_sh, workflow=wf, task=task), data.capture_share)
            all_roles += [x for x in roles if x not in all_roles]
    handles = [plt.Rectangle((0, 0), 1, 1, color=role_colour(x), label=x) for x in all_roles]
    handles += [
        Line2D([], [], color="black", ls="--", label="median capture step"),
        Line2D([], [], color="black", ls=":", lw=0.7, label=f"capture share {data.capture_share:g}"),
    ]
    fig.legend(handles=handles, loc="center right", fontsize=7, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.84, 1))
    return fig
