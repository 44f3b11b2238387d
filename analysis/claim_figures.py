"""A figure per claim (names.CLAIMS), drawn from the claim tables `analyse` writes and the per-run summary
(claims 1 and 2: analysis/claim_gain_figures.py).

Intervals are drawn as they are in the tables: a point estimate with its 95% interval, a dashed line at no effect.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from analysis.claim_gain_figures import claim_base_gain, claim_gain_factors  # noqa: E402
from analysis.empty_figure import empty_figure  # noqa: E402
from analysis.figure_data import MISSING, POLICY_COLOURS, Data, Grid, wf_name  # noqa: E402


def _empty(ax: plt.Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, **MISSING)
    ax.set_xticks([])
    ax.set_yticks([])


def _err(est: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> list[np.ndarray]:
    """Error bar lengths below and above (0 where unknown; a rounding hair below 0 is 0)."""
    return [np.clip(np.nan_to_num(est - lo), 0, None), np.clip(np.nan_to_num(hi - est), 0, None)]


def _forest(
    ax: plt.Axes, labels: list[str], est: np.ndarray, lo: np.ndarray, hi: np.ndarray, xlabel: str, colour: str = "k"
) -> None:
    """One row per label: the estimate and its interval; the dashed line is no effect (0)."""
    if not len(labels):
        _empty(ax, "no data")
        return
    y = np.arange(len(labels))[::-1]
    est, lo, hi = (np.asarray(a, dtype=float) for a in (est, lo, hi))
    ax.errorbar(est, y, xerr=_err(est, lo, hi), fmt="o", color=colour, ms=4, capsize=2, lw=1)
    ax.axvline(0, color="0.4", ls="--", lw=0.8)
    ax.set_yticks(y, labels, fontsize=7)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.grid(axis="x", alpha=0.3)


def _all_runs(data: Data) -> pd.DataFrame:
    """The per-run summary with every variant's runs, as the claim tables count them (data.summary: plain only)."""
    return data.summary if data.summary_all is None else data.summary_all


def _table(data: Data, name: str) -> pd.DataFrame:
    return (data.claims or {}).get(name, pd.DataFrame())


def claim_cliff_incidence(data: Data, grid: Grid) -> plt.Figure:
    """Isolated minus Shared cliff incidence (exact McNemar interval) and peak step (bootstrap), per cell and pooled."""
    t = _table(data, "cliff_incidence")
    if not len(t):
        return empty_figure(
            "Isolated - Shared: cliff incidence and peak step",
            "No cell has both an Isolated and a Shared run of the same seed: no paired difference to draw.",
        )
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 0.9 + 0.28 * max(len(t), 4)), sharey=True)
    # the variant column is written only where some run has a variant (names.as_written)
    variants = t["variant"].fillna("").astype(str) if "variant" in t else pd.Series([""] * len(t), index=t.index)
    labels = [
        f"{wf_name(r.workflow)}/{r.task}/{r.scale}" + (f"/{v}" if v not in ("", "nan") else "")
        for r, v in zip(t.itertuples(), variants)
    ]
    _forest(
        a,
        labels,
        t["diff_incidence"],
        t["diff_incidence_lo"],
        t["diff_incidence_hi"],
        "cliff incidence, isolated - shared (paired by cell and seed)",
    )
    _forest(
        b,
        labels,
        t["diff_peak_step"],
        t["diff_peak_step_lo"],
        t["diff_peak_step_hi"],
        "peak step, isolated - shared (steps)",
    )
    fig.tight_layout()
    return fig


def claim_signature_rates(data: Data, grid: Grid) -> plt.Figure:
    """Each failure signature's rate over all terminal eval episodes, Shared and Isolated, Wilson intervals."""
    t = _table(data, "signature_rates")
    t = t[t["note"].fillna("") == ""] if len(t) else t
    if not len(t):
        return empty_figure(
            "Failure signatures: rate over all terminal eval episodes",
            "No failure signature is measured over all eval episodes of the analysed runs: no rate to draw.",
        )
    fig, ax = plt.subplots(figsize=(7, 0.9 + 0.3 * max(len(t), 4)))
    y = np.arange(len(t))[::-1]
    for off, pol in ((0.12, "shared"), (-0.12, "isolated")):
        r, lo, hi = (t[f"rate_{pol}{s}"].to_numpy(dtype=float) for s in ("", "_lo", "_hi"))
        ax.errorbar(
            r, y + off, xerr=_err(r, lo, hi), fmt="o", ms=4, capsize=2, color=POLICY_COLOURS[pol], label=f"{pol} policy"
        )
    ax.set_yticks(y, [f"{wf_name(r.workflow)}/{r.task}: {r.signature}" for r in t.itertuples()], fontsize=7)
    ax.set_xlabel("rate over all terminal eval episodes (95% Wilson)", fontsize=8)
    ax.set_xlim(0, 1)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def claim_amplification_dose(data: Data, grid: Grid) -> plt.Figure:
    """Left: mean amplification index against parallel agents per workflow and policy; right: per run, the index
    against the terminal drop (peak - terminal)."""
    t = _table(data, "amplification_dose")
    dose = t[t["statistic"] == "mean_index"] if len(t) else t
    if not len(dose):
        note = t["note"].iloc[0] if len(t) and "note" in t else "No analysed run has parallel agents."
        return empty_figure("Amplification index against parallel agents", str(note))
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for (wf, pol), g in dose.groupby(["workflow", "policy"], sort=True):
        k = g["n_agents"].astype(float).to_numpy()
        e, lo, hi = (g[c].to_numpy(dtype=float) for c in ("estimate", "lo", "hi"))
        a.errorbar(
            k,
            e,
            yerr=_err(e, lo, hi),
            marker="o" if wf == "voting" else "s",
            color=POLICY_COLOURS.get(pol, "0.4"),
            capsize=2,
            label=f"{wf_name(wf)}, {pol}",
        )
    a.set_xlabel("parallel agents (n_votes / max_subtasks)")
    a.set_ylabel("amplification index  sum ||g_k|| / ||sum g_k||")
    a.legend(fontsize=7)
    s = _all_runs(data)  # the variants are the doses
    if "amplification_index" in s:
        s = s[s["amplification_index"].notna()]
        b.scatter(
            s["amplification_index"],
            s["peak_acc"] - s["terminal_acc"],
            s=14,
            alpha=0.7,
            c=[POLICY_COLOURS.get(p, "0.4") for p in s["policy"]],
        )
    corr = t[(t["statistic"] == "corr_drop") & (t["workflow"] == "all") & (t["policy"] == "all")]
    if len(corr):
        r = corr.iloc[0]
        b.set_title(f"r = {r.estimate:.2f} [{r.lo:.2f}, {r.hi:.2f}] over {int(r.n_runs)} runs", fontsize=9)
    b.set_xlabel("amplification index (run median step)")
    b.set_ylabel("terminal drop (peak - terminal)")
    fig.tight_layout()
    return fig


def claim_capture_onset(data: Data, grid: Grid) -> plt.Figure:
    """Left: cliff step - capture step per workflow and task (> 0: captured before the fall); right: per Shared run
    with a cliff, capture step against cliff step (above the diagonal: captured after it)."""
    t = _table(data, "capture_onset")
    t = t[t["workflow"].notna()] if len(t) else t
    s = _all_runs(data)  # as the capture_onset table counts them
    if {"capture_step", "cliff_step", "policy"} <= set(s.columns):
        s = s[(s["policy"] == "shared") & s["capture_step"].notna() & s["cliff_step"].notna()]
    else:
        s = s.iloc[0:0]
    if not len(s):
        return empty_figure(
            "Capture of a Shared policy against its cliff",
            "No Shared run has both a capture and a cliff: no capture lead to draw.",
        )
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    labels = [f"{wf_name(r.workflow)}/{r.task}" for r in t.itertuples()] if len(t) else []
    _forest(
        a,
        labels,
        t["capture_lead"] if len(t) else [],
        t["capture_lead_lo"] if len(t) else [],
        t["capture_lead_hi"] if len(t) else [],
        "cliff step - capture step (steps)",
        POLICY_COLOURS["shared"],
    )
    b.scatter(s["cliff_step"], s["capture_step"], s=14, color=POLICY_COLOURS["shared"])
    m = float(np.nanmax([s["cliff_step"].max(), s["capture_step"].max()]))
    b.plot([0, m], [0, m], color="0.4", ls="--", lw=0.8)
    b.set_xlabel("cliff step")
    b.set_ylabel("capture step")
    fig.tight_layout()
    return fig


CLAIM_FIGURES = {
    "claim_base_gain": claim_base_gain,
    "claim_gain_factors": claim_gain_factors,
    "claim_cliff_incidence": claim_cliff_incidence,
    "claim_signature_rates": claim_signature_rates,
    "claim_amplification_dose": claim_amplification_dose,
    "claim_capture_onset": claim_capture_onset,
}
