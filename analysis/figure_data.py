"""What every figure reads and shares: the tables, the matrix's grid, one style.

`load` reads `analyse`'s tables (primary eval split); `make_grid` lays out the matrix's axes,
whether or not a run exists; one colour per policy, one marker per scale, one colour per role,
the same in every figure (`legend_handles`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from analysis.gradients import CAPTURE_SHARE  # noqa: E402
from analysis.names import CLAIM_TABLES, ROLE_ORDER, WORKFLOW_NAMES, WORKFLOW_ORDER, ordered, plain_runs  # noqa: E402

POLICY_COLOURS = {"shared": "#1f77b4", "isolated": "#d62728"}
POLICY_ORDER = ["shared", "isolated"]
SCALE_MARKERS = ["o", "s", "^", "D", "v", "P"]
ROLE_COLOURS = {
    "generator": "#2ca02c",
    "evaluator": "#9467bd",
    "aggregator": "#ff7f0e",
    "orchestrator": "#8c564b",
    "worker": "#17becf",
    "synthesizer": "#e377c2",
}
OTHER_ROLE_COLOURS = ["#bcbd22", "#7f7f7f", "#393b79", "#ad494a", "#637939", "#8c6d31"]  # roles of other workflows
MISSING = dict(ha="center", va="center", color="0.45", fontsize=8, style="italic")


@dataclass
class Grid:
    """The matrix's axes: what every figure lays out, whether or not a run exists."""

    workflows: list[str]
    tasks: list[str]
    scales: list[str]
    policies: list[str]

    @property
    def markers(self) -> dict[str, str]:
        return {s: SCALE_MARKERS[i % len(SCALE_MARKERS)] for i, s in enumerate(self.scales)}

    @property
    def multi(self) -> list[str]:
        return [w for w in self.workflows if w != "single"]


@dataclass
class Data:
    """What the figures read: the per-run summary and `analyse`'s intermediate tables (primary split)."""

    summary: pd.DataFrame
    curves: pd.DataFrame
    gradients: pd.DataFrame
    amplification: pd.DataFrame
    capture_share: float = CAPTURE_SHARE
    warnings: pd.DataFrame | None = None  # first onset per run and detector (analysis/warnings_judged.py)
    claims: dict[str, pd.DataFrame] | None = None  # the claim tables by stem (analysis/claims.py)
    summary_all: pd.DataFrame | None = None  # the summary with every variant's runs (claim 5's dose-response)


def make_grid(expected: pd.DataFrame | None, summary: pd.DataFrame) -> Grid:
    grid = expected if expected is not None and len(expected) else summary
    has = len(grid) > 0
    present = set(grid["workflow"]) if has else set()
    return Grid(
        workflows=ordered(present, WORKFLOW_ORDER) or ["single"],
        tasks=sorted(set(grid["task"])) if has else ["math"],
        scales=sorted(set(grid["scale"])) if has else [],
        policies=[p for p in POLICY_ORDER if p in set(grid["policy"])] if has else POLICY_ORDER,
    )


def _read_csv(path: Path) -> pd.DataFrame:
    """A table `analyse` wrote as csv; empty when absent or without rows (keep_default_na=False: "" stays "")."""
    try:
        return (
            pd.read_csv(path, keep_default_na=False, na_values=["", "NaN", "nan"]) if path.exists() else pd.DataFrame()
        )
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def load(results: str | Path) -> Data:
    """The tables of a results directory, primary eval split only, plain runs only (a variant's runs are in the
    tables; the figures' grid has no variant axis yet)."""
    results = Path(results)
    summary = pd.read_parquet(results / "summary.parquet")
    if "primary" in summary:
        summary = summary[summary["primary"].astype(bool)]
    curves = pd.read_parquet(results / "analysis" / "curves.parquet")
    if "primary" in curves:
        curves = curves[curves["primary"].astype(bool)]
    # the claim tables as `analyse` wrote them (csv: the tables directory holds no parquet); absent ones are empty.
    # They hold every variant: claim 5's dose-response is drawn over them.
    claims = {t: _read_csv(results / "tables" / f"{t}.csv") for t in CLAIM_TABLES}
    return Data(
        plain_runs(summary),
        plain_runs(curves),
        plain_runs(pd.read_parquet(results / "analysis" / "gradients.parquet")),
        plain_runs(pd.read_parquet(results / "analysis" / "amplification.parquet")),
        warnings=pd.read_parquet(results / "analysis" / "warnings.parquet"),
        claims=claims,
        summary_all=summary,
    )


def wf_name(w: str) -> str:
    return WORKFLOW_NAMES.get(w, w)


def role_colour(role: str) -> str:
    """The role's colour in every figure; a role of a workflow added since gets one of OTHER_ROLE_COLOURS,
    the same for the same name (a stable hash of it, not Python's salted one)."""
    if role in ROLE_COLOURS:
        return ROLE_COLOURS[role]
    return OTHER_ROLE_COLOURS[int(hashlib.sha1(role.encode()).hexdigest(), 16) % len(OTHER_ROLE_COLOURS)]


def roles_in(df: pd.DataFrame) -> list[str]:
    """The roles of a table in ROLE_ORDER, then any other workflow's roles by name."""
    return ordered(set(df["role"]) if len(df) else set(), ROLE_ORDER)


def legend_handles(grid: Grid, policies: list[str] | None = None, lines: bool = False) -> list[Line2D]:
    """Policy colours then scale markers: the key every figure shares."""
    hs = [
        Line2D(
            [],
            [],
            color=POLICY_COLOURS[p],
            lw=2 if lines else 0,
            marker=None if lines else "o",
            ms=7,
            label=f"{p} policy",
        )
        for p in (policies or grid.policies)
    ]
    hs += [Line2D([], [], color="0.3", lw=0, marker=m, ms=6, label=s) for s, m in grid.markers.items()]
    return hs


def select(df: pd.DataFrame, **kw) -> pd.DataFrame:
    if not len(df):
        return df
    mask = np.ones(len(df), dtype=bool)
    for k, v in kw.items():
        mask &= (df[k] == v).to_numpy()
    return df[mask]
