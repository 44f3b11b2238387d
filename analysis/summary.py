"""The sweep's summary table: each run against `single`, and seeds aggregated per cell."""

from __future__ import annotations

import pandas as pd

from analysis.names import CELL, PLAIN, with_variant

__all__ = ["add_single_baseline", "aggregate_seeds", "SEED_METRICS"]


def add_single_baseline(summary: pd.DataFrame) -> pd.DataFrame:
    """gain_vs_single at base, peak and terminal: each cell against `single` of the same task, scale, seed, split
    (a variant's runs too: against the plain baseline, the reference of every variant)."""
    keys = ["task", "scale", "seed", "split"]
    plain = summary["variant"].fillna(PLAIN) == PLAIN if "variant" in summary else True
    single = summary[(summary["workflow"] == "single") & plain][keys + ["base_acc", "peak_acc", "terminal_acc"]]
    single = single.rename(columns={c: f"single_{c}" for c in ("base_acc", "peak_acc", "terminal_acc")})
    out = summary.merge(single, on=keys, how="left")
    for c in ("base_acc", "peak_acc", "terminal_acc"):
        out[f"gain_vs_single_{c.removesuffix('_acc')}"] = out[c] - out[f"single_{c}"]
    return out.drop(columns=[f"single_{c}" for c in ("base_acc", "peak_acc", "terminal_acc")])


SEED_METRICS = [
    "base_acc",
    "peak_acc",
    "terminal_acc",
    "gain_peak",
    "gain_terminal",
    "gain_noise",
    "gain_vs_single_base",
    "gain_vs_single_peak",
    "gain_vs_single_terminal",
    "cliff_depth",
    "peak_step",
    "cliff_step",
    "capture_index",
]


def aggregate_seeds(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per (cell, split): n_seeds, mean and std over seeds of each metric, fraction of seeds with a cliff."""
    metrics = [m for m in SEED_METRICS if m in summary]
    summary = with_variant(summary)
    g = summary.groupby(CELL + ["split"], sort=True, dropna=False)
    out = g[metrics].agg(["mean", "std"])
    out.columns = [f"{m}_{stat}" for m, stat in out.columns]
    out.insert(0, "n_seeds", g["seed"].nunique())
    out["cliff_rate"] = g["cliff"].mean()
    if "cliff_cause" in summary:
        out["cliff_causes"] = g["cliff_cause"].agg(lambda c: ", ".join(sorted(set(c.dropna()))))
    return out.reset_index()
