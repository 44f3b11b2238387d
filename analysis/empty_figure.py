"""A figure with nothing to draw: one panel that says why, its text wrapped to stay inside the panel.

Every figure function returns this in its empty case (no run analysed yet, no run of the kind the
figure is about, a claim table with no row), so a partial sweep's report shows a clear sentence in
place of empty axes.
"""

from __future__ import annotations

import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FIGSIZE = (7.0, 2.4)  # inches: a wide, short panel, so the report's pages stay short
FONT_SIZE = 10.0
MARGIN = 0.06  # of the panel's width and height, kept free around the text
NO_RUN = (
    "No run of the matrix has been analysed yet, so there is nothing to draw: "
    "snakemake figures draws the runs finished so far."
)


def _fits(fig: plt.Figure, ax: plt.Axes, text: plt.Text) -> bool:
    """Whether the drawn text lies inside the panel, within its margin."""
    renderer = fig.canvas.get_renderer()
    box, panel = text.get_window_extent(renderer), ax.get_window_extent(renderer)
    dx, dy = MARGIN * panel.width, MARGIN * panel.height
    return box.x0 >= panel.x0 + dx and box.x1 <= panel.x1 - dx and box.y0 >= panel.y0 + dy and box.y1 <= panel.y1 - dy


def empty_figure(title: str, reason: str, figsize: tuple[float, float] = FIGSIZE) -> plt.Figure:
    """One panel titled `title` with `reason` centred in it, wrapped (and, for a long reason, set smaller)
    until the whole text lies inside the panel."""
    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    ax.set_title(title, fontsize=10)
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_color("0.8")
    fig.canvas.draw()  # lays the panel out, so its size is known
    panel_px = ax.get_window_extent(fig.canvas.get_renderer()).width
    size = FONT_SIZE
    while True:
        chars = max(int(panel_px * (1 - 2 * MARGIN) / (0.6 * size * fig.dpi / 72)), 12)
        text = ax.text(
            0.5,
            0.5,
            textwrap.fill(" ".join(reason.split()), chars),
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=size,
            color="0.35",
            style="italic",
        )
        if _fits(fig, ax, text) or size <= 5:
            return fig
        text.remove()
        size -= 1
