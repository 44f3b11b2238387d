"""The whole analysis of a sweep in one process: every finished run read once, then the summary and question tables.

Writes, under `results`:
    analysis/{runs,problems,curves,gradients,amplification,signatures}.parquet   what the figures read
    summary.parquet, summary.csv          one row per (run, eval split), with gain_vs_single
    summary.md, summary.tex               the paper's table: one row per cell, mean +- std over seeds
    tables/NAME.{csv,md,html}             summary, skipped_runs, early_warnings
    tables/NAME.{csv,md,tex,html}         improves_on_base, isolated_vs_shared, variance_decomposition,
                                          failure_signatures, and the claim tables (names.CLAIMS)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pandas as pd

from analysis import tables
from analysis.claims import claim_tables
from analysis.names import AXES, CLAIM_TABLES, TABLE_FORMATS, as_written
from analysis.per_run import summarize_runs, write_tables
from analysis.settings import AnalysisSettings
from analysis.summary import add_single_baseline, aggregate_seeds
from analysis.warnings_judged import judge_run_dirs, onsets_table
from trainer.contract import rundir

SKIPPED_COLUMNS = ["run", "status", "reason"]


def skipped_runs(problems: pd.DataFrame, expected: list[str], analysed: set[str]) -> pd.DataFrame:
    """Runs of the matrix not in the analysis: `left out` (bad logs, with why) or `missing` (not finished)."""
    rows = [{"run": r.run, "status": "left out", "reason": r.problem} for r in problems.itertuples()]
    bad = set(problems["run"])
    rows += [
        {"run": r, "status": "missing", "reason": "not finished (no done.json)"}
        for r in expected
        if r not in analysed and r not in bad
    ]
    return pd.DataFrame(rows, columns=SKIPPED_COLUMNS)


QUESTIONS = ("improves_on_base", "isolated_vs_shared", "variance_decomposition", "failure_signatures")


def summary_tables(runs: pd.DataFrame, results: Path) -> pd.DataFrame:
    """The per-run summary (gain_vs_single added) and the paper's cell table, written; returns the summary."""
    if len(runs):
        summary = add_single_baseline(runs).sort_values(AXES + ["split"]).reset_index(drop=True)
    else:
        summary = pd.DataFrame(columns=["run", *AXES, "split", "primary", "gain_peak", "gain_terminal"])
    as_written(summary).to_parquet(results / "summary.parquet", index=False)
    as_written(summary).to_csv(results / "summary.csv", index=False)
    aggregated = aggregate_seeds(summary) if len(summary) else pd.DataFrame(columns=["split"])
    cells = tables.cell_table(summary, aggregated) if len(summary) else pd.DataFrame()
    tables.write_table(cells, results / "summary", ("md", "tex"))
    tables.write_table(cells, results / "tables" / "summary")
    as_written(aggregated).to_csv(results / "tables" / "summary_by_seed_stats.csv", index=False)
    return summary


def question_tables(
    summary: pd.DataFrame, parts: dict[str, pd.DataFrame], analysis: AnalysisSettings
) -> dict[str, pd.DataFrame]:
    """The study's question tables and the claim tables (names.CLAIMS) by name; empty ones without runs."""
    if not len(summary):
        return {name: pd.DataFrame() for name in (*QUESTIONS, *CLAIM_TABLES)}
    boot = {"n_boot": analysis.bootstrap_n, "seed": analysis.bootstrap_seed}
    return {
        "improves_on_base": tables.improves_on_base(summary),
        "isolated_vs_shared": tables.isolated_vs_shared(summary, **boot),
        "variance_decomposition": tables.variance_decomposition(summary, interactions=analysis.variance_interactions),
        "failure_signatures": tables.failure_signatures(summary, parts["signatures"]),
        **claim_tables(summary, parts["curves"], terminal_k=analysis.terminal_k, **boot),
    }


def warning_tables(run_dirs: list[str | Path], summary: pd.DataFrame, results: Path) -> None:
    """The early warnings judged against the cliffs (tables/early_warnings) and their onsets (analysis/)."""
    judged = [Path(d) for d in run_dirs if Path(d).name in set(summary["run"])]
    primary = summary[summary["primary"].astype(bool)] if len(summary) else summary
    tables.write_table(
        judge_run_dirs(judged, primary, list(rundir.EARLY_WARNING_DETECTORS)), results / "tables" / "early_warnings"
    )
    onsets_table(judged, primary).to_parquet(results / "analysis" / "warnings.parquet", index=False)


def _report(summary: pd.DataFrame, skipped: pd.DataFrame, timings: dict[str, float], results: Path, log) -> None:
    n = summary["run"].nunique() if len(summary) else 0
    print(f"{n} runs analysed into {results / 'summary.parquet'}", file=log)
    missing = skipped[skipped["status"] == "missing"]["run"].tolist()
    if missing:
        print(f"{len(missing)} runs not finished (missing cells): {' '.join(missing)}", file=log)
    for r in skipped[skipped["status"] == "left out"].itertuples():
        print(f"left out: {r.reason}", file=log)
    for k, v in timings.items():
        print(f"timing {k} {v:.3f}s", file=log)


def analyse(
    run_dirs: list[str | Path], expected: list[str], analysis: AnalysisSettings, results: str | Path, log=sys.stderr
) -> dict[str, float]:
    """Analyse `run_dirs` into `results` (see the module docstring); returns seconds per stage."""
    results = Path(results)
    timings: dict[str, float] = {}
    t = time.perf_counter()
    parts = summarize_runs(run_dirs, analysis)
    write_tables(parts, results / "analysis")
    timings["load_and_summarise_runs"] = time.perf_counter() - t

    t = time.perf_counter()
    summary = summary_tables(parts["runs"], results)
    skipped = skipped_runs(parts["problems"], expected, set(summary["run"]))
    tables.write_table(skipped, results / "tables" / "skipped_runs")
    for name, df in question_tables(summary, parts, analysis).items():
        tables.write_table(df, results / "tables" / name, TABLE_FORMATS)
    warning_tables(run_dirs, summary, results)
    timings["tables"] = time.perf_counter() - t
    _report(summary, skipped, timings, results, log)
    return timings
