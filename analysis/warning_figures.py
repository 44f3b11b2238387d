"""The early-warning figure: each detector's first onset per run, against the cliff (runs with one) or
alone (runs without one: false alarms)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from analysis.figure_data import POLICY_COLOURS, Data, Grid  # noqa: E402
from trainer.contract.rundir import EARLY_WARNING_DETECTORS  # noqa: E402


def early_warnings(data: Data, grid: Grid) -> plt.Figure:
    """Left: onset step minus cliff step per detector (left of the dashed line: warned before the cliff);
    right: onset steps on runs without a cliff. One dot per run and detector, coloured by policy."""
    w = data.warnings if data.warnings is not None else None
    fig, (ax_c, ax_n) = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    y = {d: i for i, d in enumerate(EARLY_WARNING_DETECTORS)}
    jitter = np.random.default_rng(0)
    for ax, cliffed in ((ax_c, True), (ax_n, False)):
        part = w[w["cliff_step"].notna() == cliffed] if w is not None and len(w) else None
        if part is not None and len(part):
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
