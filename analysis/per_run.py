"""Every finished run of the sweep analysed in one pass (one process, not one per run: startup dominates).

`summarize_runs` reads each run once and writes the per-run tables the rest of the analysis uses:
runs (one row per run and split: curve summary, capture, cliff cause), problems (runs left out, and why), curves (every
eval row), gradients (per role and step), amplification (per run and role), signatures (per run).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from analysis import gradients, signatures
from analysis.agents import agent_facts
from analysis.curves import curve_rows
from analysis.names import INTERMEDIATE, as_written, run_axes
from analysis.runs import RunLogError, RunLogs, load_run, primary_split
from analysis.settings import AnalysisSettings
from analysis.settings import eval_every as run_eval_every


def analyse_run(logs: RunLogs, analysis: AnalysisSettings) -> dict[str, pd.DataFrame]:
    """The per-run tables of one checked run."""
    cfg = logs.config
    axes = {"run": logs.run, **run_axes(cfg)}
    eval_every = run_eval_every(cfg)
    sigs = signatures.run_signatures(logs.evals, logs.train, logs.samples, analysis.signatures)
    rows = curve_rows(logs, analysis)
    main = primary_split(logs.evals)
    agents = agent_facts(logs.train, cfg, logs.roles)
    for row in rows:
        row["primary"] = row["split"] == main
        row.update(agents)
        cap = gradients.capture(
            logs.train,
            cliff_step=row["cliff_step"],
            capture_share=analysis.capture_share,
            trend_fraction=analysis.capture_trend_fraction,
        )
        row.update(cap)
        cause, cause_step = (
            signatures.cliff_cause(sigs, row["split"], row["cliff_step"], eval_every)
            if row["cliff"]
            else (None, math.nan)
        )
        row["cliff_cause"] = cause if cause or not row["cliff"] else "unexplained"
        row["cliff_cause_step"] = cause_step
        row["signatures"] = ", ".join(
            sorted(set(sigs[~sigs["at_base"] & (sigs["split"].isna() | (sigs["split"] == row["split"]))]["signature"]))
        )
    grads = gradients.role_steps(logs.train).assign(**axes)
    amp = gradients.amplification(logs.train, logs.roles.parallel_role, logs.roles.parallel_agents).assign(**axes)
    curves = logs.evals.assign(**axes, primary=logs.evals["split"] == main)
    return {
        "runs": pd.DataFrame(rows),
        "curves": curves,
        "gradients": grads,
        "amplification": amp,
        "signatures": sigs.assign(**axes),
    }


def summarize_runs(run_dirs: list[str | Path], analysis: AnalysisSettings) -> dict[str, pd.DataFrame]:
    """Every run's tables, concatenated; a run with bad logs is a `problems` row saying why."""
    parts: dict[str, list[pd.DataFrame]] = {k: [] for k in INTERMEDIATE}
    for run_dir in map(Path, run_dirs):
        try:
            tables = analyse_run(load_run(run_dir), analysis)
        except RunLogError as e:
            parts["problems"].append(pd.DataFrame([{"run": run_dir.name, "problem": str(e)}]))
            continue
        except Exception as e:  # an analysis bug on one run: name the run, keep the traceback
            raise RuntimeError(f"analysing {run_dir}: {type(e).__name__}: {e}") from e
        for k, t in tables.items():
            if len(t):
                parts[k].append(t)
    out = {}
    for k, frames in parts.items():
        out[k] = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["run"])
    out["problems"] = out["problems"].reindex(columns=["run", "problem"])
    return out


def write_tables(tables: dict[str, pd.DataFrame], out_dir: str | Path) -> list[Path]:
    """Each table as out_dir/NAME.parquet (`as_written`)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, t in tables.items():
        path = out_dir / f"{k}.parquet"
        as_written(t).to_parquet(path, index=False)
        paths.append(path)
    return paths
