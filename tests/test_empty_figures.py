"""A figure with nothing to draw is one panel whose text, wrapped, lies inside it."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from analysis.empty_figure import empty_figure  # noqa: E402
from analysis.figure_data import Data, Grid  # noqa: E402
from analysis.figures import FIGURE_FUNCTIONS  # noqa: E402

# the amplification claim's note, the longest reason a figure gives
LONG_REASON = (
    "not measured: train.parquet has no amplification_index (runs without training.agent_gradients); "
    "set training.agent_gradients: true to log each parallel agent's gradient, then rerun the analysis"
)
GRID = Grid(workflows=["single", "voting"], tasks=["math", "code"], scales=["tiny"], policies=["shared", "isolated"])


def empty_data() -> Data:
    """What `load` gives before any run has been analysed: every table without rows."""
    none = pd.DataFrame()
    return Data(summary=none, curves=none, gradients=none, amplification=none, warnings=none, claims={})


def texts_outside(fig: plt.Figure) -> list[str]:
    """The texts of the figure's panels that reach outside their panel, drawn as saved."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    out = []
    for ax in fig.axes:
        panel = ax.get_window_extent(renderer)
        for text in ax.texts:
            box = text.get_window_extent(renderer)
            if box.x0 < panel.x0 or box.x1 > panel.x1 or box.y0 < panel.y0 or box.y1 > panel.y1:
                out.append(text.get_text())
    return out


@pytest.mark.parametrize("figsize", [(7.0, 2.4), (3.0, 2.0)])
def test_a_long_reason_is_wrapped_inside_the_one_panel(figsize) -> None:
    fig = empty_figure("Amplification index against parallel agents", LONG_REASON, figsize=figsize)
    assert len(fig.axes) == 1
    [text] = fig.axes[0].texts
    assert " ".join(text.get_text().split()) == LONG_REASON and "\n" in text.get_text()
    assert not texts_outside(fig)
    plt.close(fig)


@pytest.mark.parametrize("name", list(FIGURE_FUNCTIONS))
def test_every_figure_with_nothing_to_draw_is_one_panel_saying_why(name) -> None:
    fig = FIGURE_FUNCTIONS[name](empty_data(), GRID)
    assert len(fig.axes) == 1, f"{name}: {len(fig.axes)} panels with nothing to draw"
    [text] = fig.axes[0].texts
    assert len(text.get_text()) > 20 and fig.axes[0].get_title()
    assert not texts_outside(fig), name
    plt.close(fig)


def test_a_figure_with_runs_is_drawn_in_full() -> None:
    curves = pd.DataFrame(
        {
            "workflow": "voting",
            "task": "math",
            "scale": "tiny",
            "policy": "shared",
            "seed": 0,
            "step": [0, 5, 10],
            "accuracy": [0.2, 0.4, 0.5],
        }
    )
    data = empty_data()
    data.curves = curves
    fig = FIGURE_FUNCTIONS["accuracy_curves"](data, GRID)
    assert len(fig.axes) == len(GRID.workflows) * len(GRID.tasks)
    plt.close(fig)
