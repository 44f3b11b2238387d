"""`python -m analysis calibrate-warnings`: every detector's threshold chosen on the calibration runs and
judged on the held-out ones (analysis/calibrate.py), written as a table, a figure and a config block.

Writes into OUT: heldout.csv and heldout.md (per detector: threshold, held-out recall, false-alarm rate
and median lead with their intervals, counts, whether it meets the goal), sweep.csv (the calibration
runs' recall and false-alarm rate at every grid threshold), calibration.png (held-out recall against
false-alarm rate with the goal's box), early_warning.yaml (the chosen thresholds as a `training:
early_warning:` block) and calibration.json (the runs of each set, the goal, the definitions'
versions and the verdict).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from analysis import calibrate as cal
from analysis.curves import DEFINITION_VERSIONS
from analysis.settings import AnalysisSettings
from analysis.tables import write_table
from analysis.warning_figures import calibration_figure
from trainer import early_warning as ew


@dataclass(frozen=True)
class Goal:
    """What a usable detector does on the held-out runs, and the bound calibration chooses under."""

    recall: float = 0.75  # at least this share of the cliffs warned ...
    min_lead_evals: float = 2.0  # ... at least this many evals ahead
    false_alarm: float = 0.20  # at most this share of the healthy runs warned


def calibrate_all(
    calib: list[cal.Case], held: list[cal.Case], base: dict[str, Any], goal: Goal, n_boot: int, seed: int
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """(held-out table, calibration sweep, chosen settings): the single detectors first, then the combined
    one over those that got a threshold."""
    chosen: dict[str, float] = {}
    sweeps = []
    sig_c = [cal.case_signals(c, base) for c in calib]
    for d in ew.SINGLE_DETECTORS:
        grid = cal.sweep(calib, sig_c, d, goal.min_lead_evals)
        chosen[d.name] = cal.choose(grid, d, goal.false_alarm)
        sweeps.append(grid)
    members = [n for n in ew.SINGLE_NAMES if math.isfinite(chosen[n])]
    settings = {**base, **{ew.BY_NAME[n].threshold_key: chosen[n] for n in members}, "combine": members}
    sig_c = [cal.case_signals(c, settings) for c in calib] if members else sig_c
    combined = ew.COMBINED_DETECTOR
    grid = cal.sweep(calib, sig_c, combined, goal.min_lead_evals)
    chosen[combined.name] = cal.choose(grid, combined, goal.false_alarm) if members else math.nan
    sweeps.append(grid)
    if math.isfinite(chosen[combined.name]):
        settings[combined.threshold_key] = int(chosen[combined.name])
    sig_h = [cal.case_signals(c, settings) for c in held]
    sweep = pd.concat([s for s in sweeps if len(s)] or [sweeps[0]], ignore_index=True)
    rows = [_row(d, chosen[d.name], sweep, calib, held, sig_h, goal, n_boot, seed) for d in ew.DETECTORS]
    return pd.DataFrame(rows), sweep, settings


def _row(
    d: ew.Detector,
    threshold: float,
    sweep: pd.DataFrame,
    calib: list[cal.Case],
    held: list[cal.Case],
    sig_h: list[dict],
    goal: Goal,
    n_boot: int,
    seed: int,
) -> dict[str, Any]:
    """One detector's table row: its threshold, its calibration score there and its held-out judgement."""
    at = sweep[sweep["detector"] == d.name]
    level = threshold if d.above else -threshold
    fired = at[at["level"] >= level - 1e-12] if math.isfinite(threshold) else at.iloc[0:0]
    best = fired.iloc[0] if len(fired) else None
    judged = cal.judge(held, sig_h, d, threshold, goal.min_lead_evals, n_boot, seed)
    meets = judged["recall"] >= goal.recall and judged["false_alarm_rate"] <= goal.false_alarm
    return {
        "detector": d.name,
        "version": d.version,
        "direction": "at or above" if d.above else "at or below",
        "threshold": threshold,
        "calib_recall": float(best["recall"]) if best is not None else math.nan,
        "calib_false_alarm_rate": float(best["false_alarm_rate"]) if best is not None else math.nan,
        "heldout_runs_with_signal": sum(d.name in s for s in sig_h),
        **judged,
        "meets_goal": bool(meets),
        "meets_goal_at_interval": bool(
            judged["recall_lo"] >= goal.recall and judged["false_alarm_hi"] <= goal.false_alarm
        ),
    }


def verdict(table: pd.DataFrame, goal: Goal) -> str:
    """One paragraph: which detectors meet the goal on the held-out runs, or that none does."""
    head = (
        f"Goal: >= {goal.recall:.0%} of held-out cliffs warned >= {goal.min_lead_evals:g} evals ahead with "
        f"<= {goal.false_alarm:.0%} of held-out healthy runs falsely warned."
    )
    first = table.iloc[0]
    n, r = int(first["n_cliffs"]), int(first["n_cliffs_reachable"])
    if r < n:  # cliffs too early for any warning to come in time
        head += (
            f" {n - r} of the {n} held-out cliffs come less than {goal.min_lead_evals:g} evals after the first "
            "train step: no warning can reach them in time."
        )
    met = table[table["meets_goal"]]
    if met.empty:
        return f"{head} No detector meets the goal (intervals in the table)."
    names = ", ".join(
        f"{r.detector} (recall {_ci(r.recall, r.recall_lo, r.recall_hi)}, false alarms "
        f"{_ci(r.false_alarm_rate, r.false_alarm_lo, r.false_alarm_hi)})"
        for r in met.itertuples()
    )
    sure = met[met["meets_goal_at_interval"]]
    tail = "Its intervals lie inside the goal too." if len(sure) else "Their intervals reach outside it: few runs."
    return f"{head} Meets it on point estimates: {names}. {tail}"


def _ci(value: float, lo: float, hi: float, digits: int = 2) -> str:
    if not math.isfinite(value):
        return "n/a"
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    """The held-out table as the docs show it: intervals beside their values."""
    return pd.DataFrame(
        {
            "detector": table["detector"],
            "v": table["version"],
            "threshold": [
                f"{'>=' if d == 'at or above' else '<='} {t:.3g}" if math.isfinite(t) else "none"
                for d, t in zip(table["direction"], table["threshold"])
            ],
            "recall [95% CI]": [_ci(*v) for v in zip(table["recall"], table["recall_lo"], table["recall_hi"])],
            "false alarms [95% CI]": [
                _ci(*v) for v in zip(table["false_alarm_rate"], table["false_alarm_lo"], table["false_alarm_hi"])
            ],
            "median lead, steps": [
                _ci(*v, digits=1)
                for v in zip(table["median_lead_steps"], table["lead_steps_lo"], table["lead_steps_hi"])
            ],
            "median lead, evals": [
                _ci(*v, digits=1)
                for v in zip(table["median_lead_evals"], table["lead_evals_lo"], table["lead_evals_hi"])
            ],
            "cliffs warned": [f"{w}/{n}" for w, n in zip(table["warned"], table["n_cliffs"])],
            "healthy warned": [f"{a}/{n}" for a, n in zip(table["false_alarms"], table["n_healthy"])],
            "meets goal": np.where(table["meets_goal"], "yes", "no"),
        }
    )


def config_block(settings: dict[str, Any], table: pd.DataFrame, summary: dict[str, Any]) -> str:
    """The chosen settings as YAML a user pastes under an override (or passes); on_warning left out (log)."""
    none = [r.detector for r in table.itertuples() if not math.isfinite(r.threshold)]
    block = {k: (round(float(v), 6) if isinstance(v, float) else v) for k, v in settings.items()}
    head = [
        "# Early-warning thresholds chosen by `python -m analysis calibrate-warnings` on "
        f"{summary['n_calibration']} runs, judged on {summary['n_heldout']} held-out runs (heldout.md).",
        f"# No threshold met the false-alarm bound for: {', '.join(none) or 'none'} (left at the defaults).",
        "# A training.early_warning key set in config.yaml enters the config hash: set these in an override",
        "# matched to the runs to watch (e.g. `overrides: [{match: {scale: qwen3-4b}, training: ...}]`).",
        "# training.on_warning stays `log` unless the verdict in heldout.md says a detector meets the goal.",
    ]
    return "\n".join(head) + "\n" + yaml.safe_dump({"training": {"early_warning": block}}, sort_keys=False)


def run(
    run_dirs: list[str],
    out: str | Path,
    *,
    seeds: list[int] | None,
    selectors: list[tuple[str, str]],
    analysis: AnalysisSettings,
    early_warning: dict[str, Any],
    goal: Goal,
) -> dict[str, Any]:
    """The whole command: read, split, calibrate, judge, write; returns calibration.json's content."""
    cases = [cal.load_case(d, analysis) for d in run_dirs]
    calib, held = cal.split_cases(cases, seeds, selectors)
    n_cliff = sum(c.cliff for c in calib)
    if n_cliff == 0 or n_cliff == len(calib):
        raise ValueError(
            f"the {len(calib)} calibration runs hold {n_cliff} cliffs and {len(calib) - n_cliff} healthy runs: "
            "a threshold is chosen between the two, so both must be some"
        )
    base = ew.thresholds_of({"early_warning": early_warning})
    table, sweep, settings = calibrate_all(calib, held, base, goal, analysis.bootstrap_n, analysis.bootstrap_seed)
    summary = {
        "n_calibration": len(calib),
        "n_heldout": len(held),
        "calibration_runs": {c.run: c.cliff_step if c.cliff else None for c in calib},
        "heldout_runs": {c.run: c.cliff_step if c.cliff else None for c in held},
        "calibrate_seeds": seeds,
        "calibrate_on": [f"{a}={v}" for a, v in selectors],
        "goal": goal.__dict__,
        "intervals": "recall and false alarms: 95% Wilson; median lead: 95% percentile bootstrap over warned cliffs",
        "definitions": {**DEFINITION_VERSIONS, "detectors": ew.DETECTOR_VERSIONS},
        "analysis": {
            "cliff_drop": analysis.cliff_drop,
            "smoothing_window": analysis.smoothing_window,
            "terminal_k": analysis.terminal_k,
        },
        "verdict": verdict(table, goal),
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_table(table, out / "heldout", formats=("csv",))
    (out / "heldout.md").write_text(display_table(table).to_markdown(index=False) + "\n\n" + summary["verdict"] + "\n")
    sweep.to_csv(out / "sweep.csv", index=False)
    (out / "early_warning.yaml").write_text(config_block(settings, table, summary))
    (out / "calibration.json").write_text(json.dumps(summary, indent=2) + "\n")
    fig = calibration_figure(table, goal.recall, goal.false_alarm, goal.min_lead_evals)
    fig.savefig(out / "calibration.png", dpi=150)
    return summary
