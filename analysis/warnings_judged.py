"""The early warnings judged against the cliffs: per detector, over runs with and without a cliff.

Reads each run's warnings.parquet (the trainer's detectors, trainer/early_warning.py) and its cliff
step (analysis/curves.py's definition on the primary eval split). Per detector:
- `runs_cliff`, `warned_before_cliff`: cliffed runs, and those where the detector's first onset came
  before the cliff step (`hit_rate` = their share);
- `median_lead_steps`: the median over those runs of cliff_step - first onset;
- `runs_no_cliff`, `false_alarms`: runs without a cliff, and those where the detector fired at all
  (`false_alarm_rate` = their share).
This is the in-sample view at the thresholds the runs were trained with; thresholds chosen on some runs
and judged on held-out ones, with intervals and a lead of whole evals, are analysis/calibrate_warnings.py's.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trainer.contract import rundir

COLUMNS = [
    "detector",
    "runs_cliff",
    "warned_before_cliff",
    "hit_rate",
    "median_lead_steps",
    "runs_no_cliff",
    "false_alarms",
    "false_alarm_rate",
]


def read_warnings(run_dir: str | Path) -> pd.DataFrame:
    """A run's warnings.parquet (empty with the contract's columns where the run predates early warning)."""
    path = Path(run_dir) / rundir.WARNINGS_PARQUET
    if not path.exists():
        return rundir.WARNINGS_SCHEMA.empty_table().to_pandas()
    try:
        return pd.read_parquet(path)
    except Exception as e:  # a truncated or foreign file: say which, keep the cause
        raise ValueError(f"{Path(run_dir).name}: cannot read {rundir.WARNINGS_PARQUET}: {e}") from e


def first_onsets(warnings: pd.DataFrame) -> dict[str, float]:
    """Each detector's first onset step in one run (any role)."""
    if not len(warnings):
        return {}
    return {str(d): float(g["step"].min()) for d, g in warnings.groupby("detector")}


def judge(runs: list[dict[str, Any]], detectors: list[str]) -> pd.DataFrame:
    """The per-detector table over `runs`: dicts with `cliff_step` (NaN: no cliff) and `warnings` (a frame)."""
    rows = []
    for det in detectors:
        leads, cliffed, clean, alarms = [], 0, 0, 0
        for run in runs:
            onset = first_onsets(run["warnings"]).get(det, math.nan)
            if math.isnan(run["cliff_step"]):
                clean += 1
                alarms += not math.isnan(onset)
                continue
            cliffed += 1
            if onset < run["cliff_step"]:
                leads.append(run["cliff_step"] - onset)
        rows.append(
            {
                "detector": det,
                "runs_cliff": cliffed,
                "warned_before_cliff": len(leads),
                "hit_rate": len(leads) / cliffed if cliffed else math.nan,
                "median_lead_steps": float(np.median(leads)) if leads else math.nan,
                "runs_no_cliff": clean,
                "false_alarms": alarms,
                "false_alarm_rate": alarms / clean if clean else math.nan,
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)


def onsets_table(run_dirs: list[Path], curves: pd.DataFrame) -> pd.DataFrame:
    """Each run's first onset per detector beside its cliff step: run, policy, detector, role, step,
    cliff_step, lead (cliff_step - step; NaN without a cliff): what the early-warning figure draws."""
    if not run_dirs:  # nothing finished: an empty table (the summary then has no cliff columns)
        return pd.DataFrame(columns=["run", "policy", "detector", "role", "step", "cliff_step", "lead"])
    primary = curves.drop_duplicates("run").set_index("run")
    rows = []
    for d in run_dirs:
        w = read_warnings(d).sort_values("step", kind="stable").drop_duplicates("detector")
        cliff = float(primary.loc[d.name, "cliff_step"])
        rows += [
            {
                "run": d.name,
                "policy": primary.loc[d.name, "policy"],
                "detector": r.detector,
                "role": r.role,
                "step": float(r.step),
                "cliff_step": cliff,
                "lead": cliff - float(r.step),
            }
            for r in w.itertuples()
        ]
    return pd.DataFrame(rows, columns=["run", "policy", "detector", "role", "step", "cliff_step", "lead"])


def judge_run_dirs(run_dirs: list[Path], curves: pd.DataFrame, detectors: list[str]) -> pd.DataFrame:
    """`judge` over run directories, their cliff steps read from analysis/curves.py's rows (`curves`:
    run, split, cliff_step; the first split listed per run is its primary one)."""
    if not run_dirs:  # nothing finished: every detector with no runs
        return judge([], detectors)
    primary = curves.drop_duplicates("run").set_index("run")["cliff_step"]
    missing = [d.name for d in run_dirs if d.name not in primary.index]
    if missing:
        raise ValueError(f"no curve summary for run(s) {missing}: analyse them first")
    return judge([{"cliff_step": float(primary[d.name]), "warnings": read_warnings(d)} for d in run_dirs], detectors)
