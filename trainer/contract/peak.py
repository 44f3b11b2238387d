"""The smoothed peak of an accuracy curve: one definition for the trainer (which keeps the peak
checkpoint) and the analysis (peak_acc, peak_step), so the two always name the same step.

Pure Python (no numpy or pandas): the launcher imports the run-directory contract, which
re-exports these, and must stay light. Curves are sequences of floats in step order; NaN is an
eval that did not happen or did not count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["PEAK_VERSION", "SMOOTHING_WINDOW", "smooth", "peak_index", "curve_peak"]

# The definition's version (smoothing, first maximum): change the definition, bump it. The analysis writes it
# beside its terminal and cliff versions (analysis/curves.py DEFINITION_VERSIONS).
PEAK_VERSION = 1

# Evals in the trailing moving average: one noisy eval is no peak. analysis.smoothing_window's
# default; a run config records another value only where config.yaml sets one (PEAK_WINDOW_KEY).
SMOOTHING_WINDOW = 2
# The run config's key (top level, unhashed: it decides which checkpoint is kept, not the logs).
PEAK_WINDOW_KEY = "peak_smoothing_window"


def smooth(values: Sequence[float], window: int) -> list[float]:
    """Trailing moving average over `window` evals, ignoring NaNs (a NaN eval stays NaN).

    Trailing, so an eval's smoothed value never changes when later evals arrive: the peak of the
    evals so far can only move to the newest eval.
    """
    if window < 1:
        raise ValueError(f"smoothing window {window}: at least 1")
    out = []
    for i, v in enumerate(values):
        seen = [float(x) for x in values[max(0, i - window + 1) : i + 1] if not math.isnan(x)]
        out.append(math.nan if math.isnan(v) or not seen else sum(seen) / len(seen))
    return out


def peak_index(smoothed: Sequence[float]) -> int | None:
    """The position of the first maximum of a (smoothed) curve, NaNs ignored; None when all NaN."""
    best = None
    for i, v in enumerate(smoothed):
        if not math.isnan(v) and (best is None or v > smoothed[best]):
            best = i
    return best


def curve_peak(steps: Sequence[float], accuracy: Sequence[float], window: int) -> dict[str, float] | None:
    """The smoothed peak of a curve given in step order: {step, accuracy (that eval's own),
    smoothed (the peak value)}; None when no eval counts."""
    smoothed = smooth(accuracy, window)
    i = peak_index(smoothed)
    if i is None:
        return None
    return {"step": steps[i], "accuracy": float(accuracy[i]), "smoothed": smoothed[i], "index": i}
