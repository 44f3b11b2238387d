"""One accuracy curve summarised: base, peak (smoothed), terminal, gains and the cliff detector.

The definitions of docs/evaluation.md: `summarize_curve` for one curve, `curve_rows` for every eval split of
a checked run (with each gain's noise floor). The smoothed peak is trainer/contract/peak.py's (through
the run-directory contract), the one the trainer keeps the checkpoint of.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from analysis.names import run_axes
from analysis.runs import RunLogs
from analysis.settings import AnalysisSettings
from trainer.contract import rundir

__all__ = ["summarize_curve", "curve_rows", "DEFINITION_VERSIONS"]

# Each definition's version: change a definition (summarize_curve's terminal or cliff, peak.py's peak),
# bump its version. Written into every summary row and the early-warning calibration's outputs.
TERMINAL_VERSION = 1  # terminal_acc: the mean of the last terminal_k evals
CLIFF_VERSION = 1  # peak - terminal >= cliff_drop, every eval from cliff_step to the end below peak - cliff_drop
DEFINITION_VERSIONS = {"peak": rundir.PEAK_VERSION, "terminal": TERMINAL_VERSION, "cliff": CLIFF_VERSION}


def summarize_curve(
    steps: np.ndarray, acc: np.ndarray, *, smoothing_window: int = 1, terminal_k: int = 3, cliff_drop: float = 0.1
) -> dict[str, Any]:
    """Summary of one accuracy curve (steps ascending, step 0 = the base model).

    cliff: peak_acc - terminal_acc >= cliff_drop and, from some eval after the peak to the end,
    accuracy stays below peak_acc - cliff_drop; cliff_step is the first such eval.
    """
    steps, acc = np.array(steps, dtype=float), np.array(acc, dtype=float)
    order = np.argsort(steps, kind="stable")
    steps, acc = steps[order], acc[order]
    valid = ~np.isnan(acc)
    nan = float("nan")
    out = {
        "base_acc": nan,
        "peak_acc": nan,
        "peak_step": nan,
        "terminal_acc": nan,
        "gain_peak": nan,
        "gain_terminal": nan,
        "cliff": False,
        "cliff_step": nan,
        "cliff_depth": 0.0,
        "n_evals": int(valid.sum()),
    }
    if not valid.any():
        return out
    base = acc[0] if steps[0] == 0 and valid[0] else nan
    # the smoothed peak as the trainer keeps its checkpoint (trainer/contract/peak.py, via the run-dir contract)
    top = rundir.curve_peak(steps.tolist(), acc.tolist(), smoothing_window)
    peak_i, peak = top["index"], top["smoothed"]
    terminal = float(np.mean(acc[valid][-terminal_k:]))
    out.update(
        base_acc=float(base),
        peak_acc=peak,
        peak_step=float(steps[peak_i]),
        terminal_acc=terminal,
        gain_peak=peak - base,
        gain_terminal=terminal - base,
    )
    threshold = peak - cliff_drop
    if peak - terminal >= cliff_drop - 1e-12:
        below = np.where(valid, acc < threshold + 1e-12, True)  # a NaN eval neither breaks nor makes a cliff
        for j in range(peak_i + 1, len(acc)):
            if valid[j] and below[j:].all():
                out.update(cliff=True, cliff_step=float(steps[j]), cliff_depth=peak - terminal)
                break
    return out


def curve_rows(logs: RunLogs, analysis: AnalysisSettings) -> list[dict[str, Any]]:
    """One summary row per eval split of a checked run (docs/evaluation.md's definitions), with its noise floor."""
    cfg, rows = logs.config, []
    for split, g in logs.evals.groupby("split", sort=False):
        s = summarize_curve(
            g["step"].to_numpy(),
            g["accuracy"].to_numpy(),
            smoothing_window=analysis.smoothing_window,
            terminal_k=analysis.terminal_k,
            cliff_drop=analysis.cliff_drop,
        )
        n = int(g["n"].iloc[0]) if len(g) else 0
        base = s["base_acc"]
        # two binomial standard errors of the eval set: the noise floor of a gain
        s["gain_noise"] = 2 * math.sqrt(max(base * (1 - base), 1e-12) / n) if n and not math.isnan(base) else math.nan
        rows.append(
            {
                "run": cfg["run"],
                **run_axes(cfg),
                "split": split,
                "n_eval": n,
                "max_steps": cfg["training"]["max_steps"],
                **s,
                **{f"{name}_version": v for name, v in DEFINITION_VERSIONS.items()},
            }
        )
    return rows
