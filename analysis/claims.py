"""A statistic for every claim of the study: the claim tables `analyse` writes (names.CLAIMS maps each to its
table and figure).

- `base_gain` (claim 1, analysis/claim_base_gain.py): per cell, the gain of training over the step-0 eval and over
  the single agent, with seed intervals; the share of cells above zero and the mean gain.
- `gain_factors` (claim 2, analysis/claim_gain_factors.py): the gains' variance by factor (omega squared), workflow x
  task x scale against policy, with seed-bootstrap intervals.
- `cliff_incidence` (claim 3): Isolated vs Shared cliff incidence, paired by cell (workflow, task, scale, variant)
  and seed: exact McNemar interval of the difference, and the peak-step difference with a bootstrap interval.
- `signature_rates` (claim 4, analysis/claim_signatures.py): failure signatures as rates over every eval episode.
- `amplification_dose` (claim 5, analysis/claim_amplification.py): amplification index against parallel agents.
- `capture_onset` (claim 6): the Shared policy's capture index and its onset against the cliff.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from analysis.claim_amplification import amplification_dose
from analysis.claim_base_gain import base_gain
from analysis.claim_gain_factors import gain_factors
from analysis.claim_signatures import signature_rates
from analysis.intervals import bootstrap_mean_ci, mcnemar, wilson
from analysis.tables import primary_rows

PAIR_CELL = ["workflow", "task", "scale", "variant"]

CLIFF_COLUMNS = [
    "workflow",
    "task",
    "scale",
    "variant",
    "n_pairs",
    "cliff_isolated",
    "cliff_shared",
    "isolated_only",
    "shared_only",
    "diff_incidence",
    "diff_incidence_lo",
    "diff_incidence_hi",
    "p_mcnemar",
    "diff_peak_step",
    "diff_peak_step_lo",
    "diff_peak_step_hi",
]


def _with_variant(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows with a `variant` column ("" where a summary predates it or a run has none)."""
    rows = rows.copy()
    rows["variant"] = rows["variant"].fillna("").astype(str) if "variant" in rows else ""
    return rows


def cliff_pairs(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per (cell, seed) with both policies: cliff and peak step of each (multi-agent runs, primary split)."""
    rows = _with_variant(primary_rows(summary))
    rows = rows[rows["workflow"] != "single"]
    keys = PAIR_CELL + ["seed"]
    iso, sh = (rows[rows["policy"] == p][keys + ["cliff", "peak_step"]] for p in ("isolated", "shared"))
    pairs = iso.merge(sh, on=keys, suffixes=("_isolated", "_shared"), how="inner")
    for p in ("isolated", "shared"):
        pairs[f"cliff_{p}"] = pairs[f"cliff_{p}"].astype(bool)
    return pairs


def _cliff_row(label: dict[str, str], g: pd.DataFrame, rng: np.random.Generator, n_boot: int) -> dict[str, Any]:
    b = int((g["cliff_isolated"] & ~g["cliff_shared"]).sum())
    c = int((~g["cliff_isolated"] & g["cliff_shared"]).sum())
    m = mcnemar(b, c, len(g))
    timing = (g["peak_step_isolated"] - g["peak_step_shared"]).to_numpy(dtype=float)
    lo, hi = bootstrap_mean_ci(timing, rng, n_boot)
    return {
        **label,
        "n_pairs": len(g),
        "cliff_isolated": float(g["cliff_isolated"].mean()),
        "cliff_shared": float(g["cliff_shared"].mean()),
        "isolated_only": b,
        "shared_only": c,
        "diff_incidence": m["diff"],
        "diff_incidence_lo": m["lo"],
        "diff_incidence_hi": m["hi"],
        "p_mcnemar": m["p"],
        "diff_peak_step": float(np.nanmean(timing)) if len(timing) else math.nan,
        "diff_peak_step_lo": lo,
        "diff_peak_step_hi": hi,
    }


def cliff_incidence(summary: pd.DataFrame, *, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Claim 3: Isolated minus Shared cliff incidence and peak step, paired by cell and seed.

    One row per cell, per workflow (`all` elsewhere) and overall. diff_incidence = (b - c) / n over n pairs,
    b: isolated alone fell, c: shared alone; its interval is exact given the b + c discordant pairs
    (analysis/intervals.py `mcnemar`). diff_peak_step: mean of peak_step(isolated) - peak_step(shared), with a
    seeded percentile bootstrap over the pairs.
    """
    pairs = cliff_pairs(summary) if len(summary) else pd.DataFrame()
    if not len(pairs):
        return pd.DataFrame(columns=CLIFF_COLUMNS)
    rng = np.random.default_rng(seed)
    out = [_cliff_row(dict(zip(PAIR_CELL, k)), g, rng, n_boot) for k, g in pairs.groupby(PAIR_CELL, sort=True)]
    if pairs[PAIR_CELL].drop_duplicates().shape[0] > 1:
        out += [
            _cliff_row({"workflow": wf, "task": "all", "scale": "all", "variant": "all"}, g, rng, n_boot)
            for wf, g in pairs.groupby("workflow", sort=True)
        ]
        out.append(_cliff_row(dict.fromkeys(PAIR_CELL, "all"), pairs, rng, n_boot))
    return pd.DataFrame(out, columns=CLIFF_COLUMNS)


CAPTURE_COLUMNS = [
    "workflow",
    "task",
    "n_runs",
    "capture_index",
    "capture_index_lo",
    "capture_index_hi",
    "n_captured",
    "n_cliffs",
    "n_captured_cliffs",
    "capture_lead",
    "capture_lead_lo",
    "capture_lead_hi",
    "share_captured_before_cliff",
    "share_before_lo",
    "share_before_hi",
    "note",
]


def _capture_row(label: dict[str, str], g: pd.DataFrame, rng: np.random.Generator, n_boot: int) -> dict[str, Any]:
    idx = g["capture_index"].to_numpy(dtype=float)
    both = g[g["cliff"].astype(bool) & g["capture_step"].notna()]
    lead = (both["cliff_step"] - both["capture_step"]).to_numpy(dtype=float)
    before = int((lead > 0).sum())
    lo_i, hi_i = bootstrap_mean_ci(idx, rng, n_boot)
    lo_l, hi_l = bootstrap_mean_ci(lead, rng, n_boot)
    lo_s, hi_s = wilson(before, len(lead))
    return {
        **label,
        "n_runs": len(g),
        "capture_index": float(np.nanmean(idx)),
        "capture_index_lo": lo_i,
        "capture_index_hi": hi_i,
        "n_captured": int(g["capture_step"].notna().sum()),
        "n_cliffs": int(g["cliff"].astype(bool).sum()),
        "n_captured_cliffs": len(lead),
        "capture_lead": float(lead.mean()) if len(lead) else math.nan,
        "capture_lead_lo": lo_l,
        "capture_lead_hi": hi_l,
        "share_captured_before_cliff": before / len(lead) if len(lead) else math.nan,
        "share_before_lo": lo_s,
        "share_before_hi": hi_s,
        "note": "",
    }


def capture_onset(summary: pd.DataFrame, *, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Claim 6: per workflow and task (and overall), the Shared policy's capture index and its onset vs the cliff.

    capture_index and capture_step are analysis/gradients.py `capture`'s. capture_lead = cliff_step -
    capture_step over runs with both (> 0: the policy was captured before it fell), seeded bootstrap interval;
    share_captured_before_cliff with its Wilson interval.
    """
    rows = primary_rows(summary) if len(summary) else summary
    if not len(rows) or "capture_index" not in rows:
        return pd.DataFrame([{"note": "no Shared runs with several roles"}], columns=CAPTURE_COLUMNS)
    rows = rows[(rows["policy"] == "shared") & rows["capture_index"].notna()]
    if not len(rows):
        return pd.DataFrame([{"note": "no Shared runs with several roles"}], columns=CAPTURE_COLUMNS)
    rng = np.random.default_rng(seed)
    out = [
        _capture_row({"workflow": wf, "task": task}, g, rng, n_boot)
        for (wf, task), g in rows.groupby(["workflow", "task"], sort=True)
    ]
    if len(out) > 1:
        out.append(_capture_row({"workflow": "all", "task": "all"}, rows, rng, n_boot))
    return pd.DataFrame(out, columns=CAPTURE_COLUMNS)


def claim_tables(
    summary: pd.DataFrame, curves: pd.DataFrame, *, terminal_k: int, n_boot: int, seed: int
) -> dict[str, pd.DataFrame]:
    """Every claim table by its name in names.CLAIMS (each with its own generator of the same seed)."""
    return {
        "base_gain": base_gain(summary, n_boot=n_boot, seed=seed),
        "gain_factors": gain_factors(summary, n_boot=n_boot, seed=seed),
        "cliff_incidence": cliff_incidence(summary, n_boot=n_boot, seed=seed),
        "signature_rates": signature_rates(summary, curves, terminal_k=terminal_k, n_boot=n_boot, seed=seed),
        "amplification_dose": amplification_dose(summary, n_boot=n_boot, seed=seed),
        "capture_onset": capture_onset(summary, n_boot=n_boot, seed=seed),
    }
