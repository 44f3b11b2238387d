"""The study's questions as tables, from the per-run summary (primary eval split, one row per run).

- `improves_on_base`: the share of cells (mean over seeds) whose peak / terminal accuracy beats the base model,
  at all and by more than noise (`gain_noise`: two binomial standard errors of the eval set at base accuracy).
- `isolated_vs_shared`: Isolated minus Shared, paired by cell and seed, with seeded bootstrap intervals over seeds.
- `variance_decomposition`: sequential sums of squares of the gains over the factors and their two-way interactions.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.anova import nested_bases, sequential_ss, term_blocks
from analysis.intervals import bootstrap_mean_ci
from analysis.names import CELL, as_written, has_variants, with_variant, workflow_rank

GAINS = ["gain_peak", "gain_terminal"]


def primary_rows(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per run: its primary eval split."""
    if "primary" in summary:
        summary = summary[summary["primary"].astype(bool)]
    return with_variant(summary)


def cell_means(summary: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds of each cell's gains (and of its noise floor, `gain_noise`, where the summary has it)."""
    rows = primary_rows(summary)
    return rows.groupby(CELL, as_index=False)[[c for c in GAINS + ["gain_noise"] if c in rows]].mean()


def beyond_noise(gain: pd.Series, noise: pd.Series) -> pd.Series:
    """Whether each gain exceeds its noise floor (False where either is unknown)."""
    return (gain > noise) & gain.notna() & noise.notna()


def improves_on_base(summary: pd.DataFrame) -> pd.DataFrame:
    """Share of cells whose mean gain over seeds is > 0, and > its noise floor, at peak and at terminal.

    Overall and by each factor of the cell. The noise floor is `gain_noise` (two binomial standard
    errors of the eval set at base accuracy); without it the beyond-noise shares are NaN.
    """
    cells = cell_means(summary)
    noise = cells["gain_noise"] if "gain_noise" in cells else pd.Series(np.nan, index=cells.index)
    out = []

    def share(mask: pd.Series) -> float:
        return float(mask.mean()) if len(mask) else np.nan

    def row(group: str, value: str, g: pd.DataFrame) -> dict:
        n = noise.loc[g.index]
        known = n.notna().all() and len(g)
        return {
            "group": group,
            "value": value,
            "n_cells": len(g),
            "share_peak_improves": share(g["gain_peak"] > 0),
            "share_terminal_improves": share(g["gain_terminal"] > 0),
            "share_peak_beyond_noise": share(beyond_noise(g["gain_peak"], n)) if known else np.nan,
            "share_terminal_beyond_noise": share(beyond_noise(g["gain_terminal"], n)) if known else np.nan,
            "mean_gain_peak": float(g["gain_peak"].mean()) if len(g) else np.nan,
            "mean_gain_terminal": float(g["gain_terminal"].mean()) if len(g) else np.nan,
        }

    out.append(row("all", "all", cells))
    for factor in CELL if has_variants(cells) else [f for f in CELL if f != "variant"]:
        for value, g in cells.groupby(factor, sort=True):
            out.append(row(factor, str(value), g))
    return pd.DataFrame(
        out,
        columns=[
            "group",
            "value",
            "n_cells",
            "share_peak_improves",
            "share_terminal_improves",
            "share_peak_beyond_noise",
            "share_terminal_beyond_noise",
            "mean_gain_peak",
            "mean_gain_terminal",
        ],
    )


def isolated_vs_shared(summary: pd.DataFrame, *, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Isolated minus Shared peak and terminal accuracy, paired by (workflow, task, scale, variant, seed).

    One row per cell (bootstrap over its seeds) and per variant one `all` row (bootstrap over its pairs).
    """
    rows = primary_rows(summary)
    keys = ["workflow", "task", "scale", "variant", "seed"]
    wide = rows.pivot_table(index=keys, columns="policy", values=["peak_acc", "terminal_acc"], aggfunc="mean")
    cols = [
        "workflow",
        "task",
        "scale",
        "variant",
        "n_pairs",
        "diff_peak",
        "diff_peak_lo",
        "diff_peak_hi",
        "diff_terminal",
        "diff_terminal_lo",
        "diff_terminal_hi",
    ]
    if not {"shared", "isolated"} <= set(wide.columns.get_level_values(1)):
        return pd.DataFrame(columns=cols)
    diff = (
        pd.DataFrame({m: wide[(f"{m}_acc", "isolated")] - wide[(f"{m}_acc", "shared")] for m in ("peak", "terminal")})
        .dropna()
        .reset_index()
    )
    rng = np.random.default_rng(seed)
    out = []

    def row(wf: str, task: str, scale: str, variant: str, g: pd.DataFrame) -> dict:
        r = {"workflow": wf, "task": task, "scale": scale, "variant": variant, "n_pairs": len(g)}
        for m in ("peak", "terminal"):
            lo, hi = bootstrap_mean_ci(g[m].to_numpy(), rng, n_boot)
            r.update({f"diff_{m}": float(g[m].mean()), f"diff_{m}_lo": lo, f"diff_{m}_hi": hi})
        return r

    for (wf, task, scale, variant), g in diff.groupby(["workflow", "task", "scale", "variant"], sort=True):
        out.append(row(wf, task, scale, variant, g))
    for variant, g in diff.groupby("variant", sort=True):
        out.append(row("all", "all", "all", variant, g))
    return pd.DataFrame(out, columns=cols)


def variance_decomposition(
    summary: pd.DataFrame, factors: list[str] | None = None, interactions: bool = True
) -> pd.DataFrame:
    """Share of the variation of each gain explained by each factor, then each two-way interaction.

    Sequential (type I) sums of squares (analysis/anova.py): terms enter in the order given (factors, then their
    pairs), each credited with the drop in residual sum of squares it brings; `residual` is what none explains.
    Multi-agent runs only (`single` has one policy, which would confound policy with workflow).
    """
    rows = primary_rows(summary)
    factors = factors or [f for f in CELL if f != "variant" or has_variants(rows)]
    rows = rows[rows["workflow"] != "single"].dropna(subset=GAINS)
    cols = ["term", "df"] + [f"{g}_{k}" for g in GAINS for k in ("ss", "share")]
    if len(rows) < 2:
        return pd.DataFrame(columns=cols)
    terms = term_blocks(rows, factors, 2 if interactions else 1)
    nested = nested_bases([block for _, block in terms], len(rows))
    out = pd.DataFrame(
        {"term": [" x ".join(t) for t, _ in terms] + ["residual"], "df": nested.df + [nested.df_residual]}
    )
    for gain in GAINS:
        ss, rss, total = sequential_ss(nested, rows[gain].to_numpy(dtype=float))
        out[f"{gain}_ss"] = [*ss, rss]
        out[f"{gain}_share"] = out[f"{gain}_ss"] / total if total > 0 else np.nan
    return out[cols]


def failure_signatures(summary: pd.DataFrame, signatures: pd.DataFrame) -> pd.DataFrame:
    """Per workflow, policy, variant and signature: runs ending in it, cliffs it names, mean onset step."""
    cols = ["workflow", "policy", "variant", "signature", "n_runs", "n_cliffs_named", "onset_step_mean"]
    sig = (
        signatures[~signatures["at_base"].astype(bool)]
        if len(signatures) and "at_base" in signatures
        else pd.DataFrame(columns=["run", "workflow", "policy", "variant", "signature", "onset_step"])
    )
    sig = with_variant(sig)
    rows = primary_rows(summary)
    named = (
        rows[rows["cliff"].astype(bool)].groupby(["workflow", "policy", "variant", "cliff_cause"]).size()
        if len(rows) and "cliff_cause" in rows
        else pd.Series(dtype=float)
    )
    out = []
    for (wf, pol, var, name), g in sig.groupby(["workflow", "policy", "variant", "signature"], sort=True):
        out.append(
            {
                "workflow": wf,
                "policy": pol,
                "variant": var,
                "signature": name,
                "n_runs": g["run"].nunique(),
                "n_cliffs_named": int(named.get((wf, pol, var, name), 0)),
                "onset_step_mean": float(g["onset_step"].mean()),
            }
        )
    for (wf, pol, var, name), n in named.items():
        if name == "unexplained":
            out.append(
                {
                    "workflow": wf,
                    "policy": pol,
                    "variant": var,
                    "signature": "unexplained",
                    "n_runs": int(n),
                    "n_cliffs_named": int(n),
                    "onset_step_mean": np.nan,
                }
            )
    df = pd.DataFrame(out, columns=cols)
    return df.sort_values(
        ["workflow", "policy", "variant", "signature"],
        key=lambda s: s.map(workflow_rank) if s.name == "workflow" else s,
    ).reset_index(drop=True)


def cell_table(summary: pd.DataFrame, aggregated: pd.DataFrame) -> pd.DataFrame:
    """The paper's summary table: one row per cell (primary split), mean +- std over seeds, cliff rate.

    `gain_noise` is the cell's noise floor (mean over seeds of two binomial standard errors of the
    eval set); `peak_beats_base` / `terminal_beats_base` say whether the mean gain exceeds it.
    """
    main = set(primary_rows(summary)["split"]) if len(summary) else set()
    agg = aggregated[aggregated["split"].isin(main)] if len(aggregated) else aggregated
    out = agg[CELL + ["n_seeds"]].copy()
    for m in ("base_acc", "peak_acc", "terminal_acc", "gain_peak", "gain_terminal", "gain_vs_single_terminal"):
        if f"{m}_mean" in agg:
            out[m] = [
                f"{a:.3f} ± {b:.3f}" if b == b else (f"{a:.3f}" if a == a else "")
                for a, b in zip(agg[f"{m}_mean"], agg[f"{m}_std"])
            ]
    if "gain_noise_mean" in agg:
        out["gain_noise"] = agg["gain_noise_mean"].round(3)
        for at in ("peak", "terminal"):
            beats = beyond_noise(agg[f"gain_{at}_mean"], agg["gain_noise_mean"])
            out[f"{at}_beats_base"] = np.where(beats, "yes", "no")
    out["cliff_rate"] = agg["cliff_rate"].round(2)
    if "cliff_causes" in agg:
        out["cliff_causes"] = agg["cliff_causes"]
    return out.sort_values(CELL, key=lambda s: s.map(workflow_rank) if s.name == "workflow" else s).reset_index(
        drop=True
    )


def write_table(df: pd.DataFrame, stem: str | Path, formats: tuple[str, ...] = ("csv", "md", "html")) -> list[Path]:
    """The table as STEM.csv / .md / .html / .tex (floats to 3 decimals outside the csv), `as_written`."""
    df = as_written(df)
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        p = stem.with_suffix(f".{fmt}")
        if fmt == "csv":
            df.to_csv(p, index=False)
        elif fmt == "md":
            p.write_text((df.to_markdown(index=False, floatfmt=".3f") if len(df) else "(no rows)") + "\n")
        elif fmt == "html":
            p.write_text(df.to_html(index=False, float_format=lambda v: f"{v:.3f}", na_rep="", border=0))
        elif fmt == "tex":
            p.write_text(df.to_latex(index=False, float_format="%.3f", na_rep="--"))
        else:
            raise ValueError(f"unknown table format {fmt!r}")
        paths.append(p)
    return paths
