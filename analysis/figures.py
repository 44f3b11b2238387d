"""The study's figures, from the tables `analysis analyse` writes (parquet alone).

Figures 1-4 (accuracy curves, peak vs terminal, gains, cliffs) live here, 5-6 (gradients) in
`analysis.gradient_figures`; both draw with `analysis.figure_data`'s grid and style. Cells of the
matrix with no analysed run are drawn as labelled "missing" gaps. `render_all` renders them all.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker as mticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from analysis.claim_figures import CLAIM_FIGURES  # noqa: E402
from analysis.empty_figure import NO_RUN, empty_figure  # noqa: E402
from analysis.figure_data import (  # noqa: E402
    MISSING,
    POLICY_COLOURS,
    Data,
    Grid,
    legend_handles,
    load,
    make_grid,
    select,
    wf_name,
)
from analysis.gradient_figures import isolated_gradients, shared_capture  # noqa: E402
from analysis.gradients import CAPTURE_SHARE  # noqa: E402
from analysis.names import FIGURE_FORMATS  # noqa: E402
from analysis.warning_figures import early_warnings  # noqa: E402


def _save(fig: plt.Figure, out_dir: Path, name: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.{ext}" for ext in FIGURE_FORMATS]
    for p in paths:
        fig.savefig(p, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return paths


# 1 -------------------------------------------------------------------------------------------------------------
def _curve_cell(ax: plt.Axes, cell: pd.DataFrame, grid: Grid, wf: str) -> list[str]:
    """One workflow x task panel: a line per scale and policy (mean over seeds, band = +-1 std over seeds), base
    accuracy dashed. Returns the scale/policy pairs with no run."""
    missing = []
    for scale in grid.scales:
        for policy in grid.policies:
            if wf == "single" and policy != "shared":
                continue
            g = select(cell, scale=scale, policy=policy)
            if not len(g):
                missing.append(f"{scale}/{policy}")
                continue
            by = g.groupby("step")["accuracy"]
            mean, std = by.mean(), by.std().fillna(0.0)
            colour = POLICY_COLOURS[policy]
            ax.plot(
                mean.index,
                mean.values,
                color=colour,
                marker=grid.markers[scale],
                ms=3.5,
                lw=1.2,
                markevery=max(len(mean) // 8, 1),
            )
            if g["seed"].nunique() > 1:
                ax.fill_between(mean.index, (mean - std).values, (mean + std).values, color=colour, alpha=0.13, lw=0)
            base = g[g["step"] == 0]["accuracy"].mean()
            if base == base:
                ax.axhline(base, color=colour, ls="--", lw=0.8, alpha=0.6)
    return missing


def _missing_note(ax: plt.Axes, missing: list[str], cell_empty: bool) -> None:
    """A panel's gaps: "missing" across an empty panel, else the missing lines named in a corner."""
    if missing and cell_empty:
        ax.text(0.5, 0.5, "missing", transform=ax.transAxes, **MISSING)
    elif missing:
        more = " ..." if len(missing) > 4 else ""
        ax.text(
            0.02,
            0.03,
            "missing: " + ", ".join(missing[:4]) + more,
            transform=ax.transAxes,
            ha="left",
            va="bottom",
            color="0.45",
            fontsize=6,
            style="italic",
        )


def accuracy_curves(data: Data, grid: Grid) -> plt.Figure:
    """Rows = workflow, columns = task; a line per scale and policy (mean over seeds, band = +-1 std over seeds),
    base accuracy dashed."""
    title = "Eval accuracy over training (mean over seeds, band: ±1 std; dashed: base model)"
    if not len(data.curves):
        return empty_figure(title, NO_RUN)
    nr, nc = len(grid.workflows), len(grid.tasks)
    fig, axes = plt.subplots(nr, nc, figsize=(4.4 * nc, 2.6 * nr + 0.8), squeeze=False, sharex=True, sharey=True)
    for r, wf in enumerate(grid.workflows):
        for c, task in enumerate(grid.tasks):
            ax = axes[r][c]
            ax.set_title(f"{wf_name(wf)} / {task}", fontsize=9)
            cell = select(data.curves, workflow=wf, task=task)
            _missing_note(ax, _curve_cell(ax, cell, grid, wf), cell_empty=not len(cell))
            if r == nr - 1:
                ax.set_xlabel("training step")
                ax.xaxis.set_major_locator(mticker.MaxNLocator(integer=True))  # steps are whole numbers
            if c == 0:
                ax.set_ylabel("eval accuracy")
            ax.grid(alpha=0.3)
    handles = legend_handles(grid, lines=True) + [Line2D([], [], color="0.3", ls="--", lw=0.8, label="base model")]
    fig.legend(
        handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False, bbox_to_anchor=(0.5, 0.0)
    )
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


def _cells(grid: Grid, workflows: list[str]) -> list[tuple[str, str, str]]:
    return [(wf, task, scale) for wf in workflows for task in grid.tasks for scale in grid.scales]


# 2 -------------------------------------------------------------------------------------------------------------
def peak_vs_terminal(data: Data, grid: Grid) -> plt.Figure:
    """Per cell a dumbbell from peak (filled) to terminal (open) accuracy, mean over seeds; Shared above Isolated."""
    if not len(data.summary):
        return empty_figure("Peak vs terminal accuracy per cell", NO_RUN)
    wfs = grid.workflows
    fig, axes = plt.subplots(
        1,
        len(wfs),
        figsize=(3.3 * len(wfs), 0.45 * len(grid.tasks) * len(grid.scales) + 1.6),
        squeeze=False,
        sharex=True,
    )
    s = data.summary
    means = s.groupby(["workflow", "task", "scale", "policy"])[["peak_acc", "terminal_acc", "base_acc"]].mean()
    labels = [f"{t} / {sc}" for t in grid.tasks for sc in grid.scales]
    for i, wf in enumerate(wfs):
        ax = axes[0][i]
        policies = ["shared"] if wf == "single" else grid.policies
        for y, (task, scale) in enumerate((t, sc) for t in grid.tasks for sc in grid.scales):
            for _j, policy in enumerate(policies):
                off = 0.0 if len(policies) == 1 else (0.17 if policy == "shared" else -0.17)
                key = (wf, task, scale, policy)
                yy = len(labels) - 1 - y + off
                if key not in means.index:
                    ax.text(
                        0.5, yy, f"{policy}: missing", transform=ax.get_yaxis_transform(), **{**MISSING, "fontsize": 6}
                    )
                    continue
                row = means.loc[key]
                colour = POLICY_COLOURS[policy]
                ax.plot([row["peak_acc"], row["terminal_acc"]], [yy, yy], color=colour, lw=1.5, alpha=0.8)
                ax.plot(row["peak_acc"], yy, marker=grid.markers[scale], color=colour, ms=6)
                ax.plot(row["terminal_acc"], yy, marker=grid.markers[scale], color=colour, ms=6, mfc="white")
                ax.plot(row["base_acc"], yy, marker="|", color="0.3", ms=8)
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels[::-1] if i == 0 else [""] * len(labels), fontsize=7)
        ax.set_ylim(-0.6, len(labels) - 0.4)
        ax.set_title(wf_name(wf), fontsize=9)
        ax.set_xlabel("accuracy")
        ax.grid(axis="x", alpha=0.3)
    handles = legend_handles(grid) + [
        Line2D([], [], color="0.3", marker="o", lw=0, label="peak (filled)"),
        Line2D([], [], color="0.3", marker="o", mfc="white", lw=0, label="terminal (open)"),
        Line2D([], [], color="0.3", marker="|", lw=0, ms=8, label="base"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 8), fontsize=7, frameon=False)
    fig.suptitle("Peak vs terminal accuracy per cell (mean over seeds)", fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def _heat(
    ax: plt.Axes,
    mat: np.ndarray,
    rows: list[str],
    cols: list[str],
    vmax: float,
    cmap: str,
    fmt: str,
    vmin: float | None = None,
) -> matplotlib.image.AxesImage:
    """A heatmap with values written in, NaN cells hatched grey and labelled missing."""
    vmin = -vmax if vmin is None else vmin
    im = ax.imshow(np.ma.masked_invalid(mat), cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    for (i, j), v in np.ndenumerate(mat):
        if np.isnan(v):
            ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=True, fc="0.93", hatch="//", ec="0.75", lw=0))
            ax.text(j, i, "missing", **{**MISSING, "fontsize": 6})
        else:
            r, g, b, _ = im.cmap(im.norm(v))
            dark = 0.299 * r + 0.587 * g + 0.114 * b < 0.5
            ax.text(j, i, format(v, fmt), ha="center", va="center", fontsize=7, color="white" if dark else "black")
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels(cols, rotation=35, ha="right", fontsize=7)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows, fontsize=7)
    return im


# 3 -------------------------------------------------------------------------------------------------------------
def gain_heatmaps(data: Data, grid: Grid) -> plt.Figure:
    """Gain over base (peak, terminal), workflow x (task, scale), one panel per policy; mean over seeds."""
    if not len(data.summary):
        return empty_figure("Gain over the base model", NO_RUN)
    means = data.summary.groupby(["workflow", "task", "scale", "policy"])[["gain_peak", "gain_terminal"]].mean()
    cols = [(t, sc) for t in grid.tasks for sc in grid.scales]
    vals = means.to_numpy().ravel()
    vmax = max(float(np.nanmax(np.abs(vals))) if np.isfinite(vals).any() else 0.1, 0.01)
    fig, axes = plt.subplots(
        2,
        len(grid.policies),
        figsize=(0.9 * len(cols) * len(grid.policies) + 4.5, 0.55 * len(grid.workflows) * 2 + 3.4),
        squeeze=False,
        layout="constrained",
    )
    im = None
    for r, gain in enumerate(["gain_peak", "gain_terminal"]):
        for c, policy in enumerate(grid.policies):
            wfs = [w for w in grid.workflows if not (w == "single" and policy != "shared")]
            mat = np.full((len(wfs), len(cols)), np.nan)
            for i, wf in enumerate(wfs):
                for j, (t, sc) in enumerate(cols):
                    if (wf, t, sc, policy) in means.index:
                        mat[i, j] = means.loc[(wf, t, sc, policy), gain]
            ax = axes[r][c]
            im = _heat(ax, mat, [wf_name(w) for w in wfs], [f"{t}\n{sc}" for t, sc in cols], vmax, "RdBu_r", "+.2f")
            ax.set_title(f"{policy} policy: {gain.replace('_', ' ')}", fontsize=9, color=POLICY_COLOURS[policy])
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.6, label="accuracy gain over base")
    fig.suptitle("Gain over the base model (mean over seeds)", fontsize=10)
    return fig


# 4 -------------------------------------------------------------------------------------------------------------
def cliffs(data: Data, grid: Grid) -> plt.Figure:
    """Cliff incidence (fraction of seeds) per cell and policy; the cliff step (fraction of training) by workflow."""
    if not len(data.summary):
        return empty_figure("Cliffs: a drop from the peak sustained to the end", NO_RUN)
    s = data.summary
    rate = s.groupby(["workflow", "task", "scale", "policy"])["cliff"].mean()
    cols = [(t, sc) for t in grid.tasks for sc in grid.scales]
    fig = plt.figure(
        figsize=(0.8 * len(cols) * len(grid.policies) + 5.0, 0.55 * len(grid.workflows) + 3.0), layout="constrained"
    )
    gs = fig.add_gridspec(1, len(grid.policies) + 1, width_ratios=[1] * len(grid.policies) + [1.3])
    im = None
    for c, policy in enumerate(grid.policies):
        ax = fig.add_subplot(gs[0, c])
        wfs = [w for w in grid.workflows if not (w == "single" and policy != "shared")]
        mat = np.full((len(wfs), len(cols)), np.nan)
        for i, wf in enumerate(wfs):
            for j, (t, sc) in enumerate(cols):
                if (wf, t, sc, policy) in rate.index:
                    mat[i, j] = rate.loc[(wf, t, sc, policy)]
        im = _heat(ax, mat, [wf_name(w) for w in wfs], [f"{t}\n{sc}" for t, sc in cols], 1.0, "Reds", ".2f", vmin=0.0)
        ax.set_title(f"cliff rate, {policy} policy", fontsize=9, color=POLICY_COLOURS[policy])
    heat_axes = list(fig.axes)
    fig.colorbar(im, ax=heat_axes, shrink=0.8, label="fraction of seeds with a cliff", location="bottom", aspect=40)
    ax = fig.add_subplot(gs[0, -1])
    cl = s[s["cliff"].astype(bool)]
    rng = np.random.default_rng(0)
    for i, wf in enumerate(grid.workflows):
        for policy in grid.policies:
            off = -0.15 if policy == "shared" else 0.15
            for scale in grid.scales:
                g = select(cl, workflow=wf, policy=policy, scale=scale)
                if not len(g):
                    continue
                x = (g["cliff_step"] / g["max_steps"]).to_numpy(dtype=float)
                y = i + off + rng.uniform(-0.08, 0.08, len(x))
                ax.scatter(x, y, color=POLICY_COLOURS[policy], marker=grid.markers[scale], s=18, alpha=0.8)
        if not len(select(cl, workflow=wf)):
            ax.text(0.5, i, "no cliffs" if len(select(s, workflow=wf)) else "missing", **MISSING)
    ax.set_yticks(range(len(grid.workflows)))
    ax.set_yticklabels([wf_name(w) for w in grid.workflows], fontsize=7)
    ax.set_ylim(len(grid.workflows) - 0.5, -0.5)
    ax.set_xlim(0, 1)
    ax.set_xlabel("cliff step / training steps")
    ax.set_title("when cliffs happen", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(handles=legend_handles(grid), fontsize=6, loc="upper left", bbox_to_anchor=(1.02, 1), frameon=False)
    fig.suptitle("Cliffs: a drop from the peak sustained to the end", fontsize=10)
    return fig


FIGURE_FUNCTIONS: dict[str, Callable[[Data, Grid], plt.Figure]] = {
    "accuracy_curves": accuracy_curves,
    "peak_vs_terminal": peak_vs_terminal,
    "gain_heatmaps": gain_heatmaps,
    "cliffs": cliffs,
    "isolated_gradients": isolated_gradients,
    "shared_capture": shared_capture,
    "early_warnings": early_warnings,
    **CLAIM_FIGURES,
}


def render_all(
    results: str | Path,
    out_dir: str | Path,
    expected: pd.DataFrame | None = None,
    capture_share: float = CAPTURE_SHARE,
    log=sys.stderr,
) -> dict[str, float]:
    """Every figure as PNG and PDF; `expected` (the matrix's axes) decides the grid, so missing cells show as
    gaps. Returns seconds per stage (load, each figure) and logs them."""
    t = time.perf_counter()
    data = load(results)
    data.capture_share = capture_share
    grid = make_grid(expected, data.summary)
    timings = {"figures_load": time.perf_counter() - t}
    for name, fn in FIGURE_FUNCTIONS.items():
        t = time.perf_counter()
        for p in _save(fn(data, grid), Path(out_dir), name):
            print(p, file=log)
        timings[f"figure_{name}"] = time.perf_counter() - t
    for k, v in timings.items():
        print(f"timing {k} {v:.3f}s", file=log)
    return timings
