"""Early-warning thresholds calibrated on one subset of a sweep's finished runs and judged on the rest.

Every run is labelled from its eval.parquet (analysis/curves.py's cliff on its primary split: a cliff
run with its cliff step, or a healthy one) and every detector of trainer/early_warning.py is replayed
over its train.parquet (`role_signals`, the trainer's own definition). A cliff counts as warned when a
detector's first onset (any role) comes at a step <= cliff_step - min_lead_evals x eval_every; a healthy
run is falsely warned when the detector fires at all.

Choosing (calibration runs): a detector's outcome changes only where its threshold passes a run's
extreme signal value (the highest up to the warning deadline on a cliff run, over the whole run on a
healthy one), so those values are the grid. The threshold kept maximises recall subject to a
false-alarm rate <= max_false_alarm (ties: the lower rate), set halfway between its grid value and the
next one that would warn more runs (a count: the grid value itself); a detector whose best has recall 0
gets none. The combined detector is calibrated last, over the single detectors that got a threshold.

Judging (held-out runs): recall of the cliffs and the false-alarm rate of the healthy runs, each with a
95% Wilson interval; the median lead (cliff_step - first onset, in steps and in evals) of the warned
cliffs with a 95% percentile bootstrap interval over those runs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.curves import summarize_curve
from analysis.intervals import bootstrap_stat_ci, wilson
from analysis.settings import AnalysisSettings, eval_every
from trainer import early_warning as ew
from trainer.contract import rundir

AXES = ("workflow", "task", "scale", "policy", "seed", "variant")


@dataclass
class Case:
    """One finished run as the calibration sees it: its axes, label and per-role train rows."""

    run: str
    axes: dict[str, str]
    eval_every: float
    cliff_step: float  # NaN: a healthy run
    roles: list[tuple[str, pd.DataFrame]]  # early_warning.role_frames of its train.parquet
    first_step: float  # its first train step: a cliff whose deadline comes before it cannot be warned in time

    @property
    def cliff(self) -> bool:
        """Whether the run fell off a cliff."""
        return not math.isnan(self.cliff_step)

    def deadline(self, min_lead_evals: float) -> float:
        """The last step a warning may come to count as warned ahead of the cliff."""
        return self.cliff_step - min_lead_evals * self.eval_every


def load_case(run_dir: str | Path, analysis: AnalysisSettings) -> Case:
    """A finished run directory read and labelled; an unfinished or unreadable one is an error naming it."""
    d = Path(run_dir)
    for name in (rundir.DONE_JSON, rundir.CONFIG_JSON, rundir.TRAIN_PARQUET, rundir.EVAL_PARQUET):
        if not (d / name).exists():
            raise ValueError(f"{d}: no {name} (calibrate-warnings takes finished run directories)")
    config = json.loads((d / rundir.CONFIG_JSON).read_text())
    rid = rundir.parse_run_id(config.get("run", d.name))
    try:
        train, evals = pd.read_parquet(d / rundir.TRAIN_PARQUET), pd.read_parquet(d / rundir.EVAL_PARQUET)
    except Exception as e:  # a truncated or foreign file: say which run, keep the cause
        raise ValueError(f"{d.name}: cannot read its parquet logs: {e}") from e
    if evals.empty:
        raise ValueError(f"{d.name}: {rundir.EVAL_PARQUET} has no eval")
    primary = evals[evals["split"] == evals["split"].iloc[0]]  # the first split listed (as curve_rows)
    curve = summarize_curve(
        primary["step"].to_numpy(),
        primary["accuracy"].to_numpy(),
        smoothing_window=analysis.smoothing_window,
        terminal_k=analysis.terminal_k,
        cliff_drop=analysis.cliff_drop,
    )
    axes = {k: str(v) for k, v in rid.axes().items() if k in AXES and v is not None}
    return Case(
        run=d.name,
        axes=axes,
        eval_every=eval_every(config),
        cliff_step=float(curve["cliff_step"]),
        roles=ew.role_frames(train),
        first_step=float(train["step"].min()) if len(train) else math.inf,
    )


def parse_selector(text: str) -> tuple[str, str]:
    """AXIS=VALUE (e.g. scale=qwen3-0.6b), the axis one of a run id's."""
    axis, sep, value = text.partition("=")
    if not sep or axis not in AXES or not value:
        raise ValueError(f"--calibrate-on {text!r}: expected AXIS=VALUE with AXIS one of {', '.join(AXES)}")
    return axis, value


def split_cases(
    cases: list[Case], seeds: list[int] | None, selectors: list[tuple[str, str]]
) -> tuple[list[Case], list[Case]]:
    """(calibration, held-out): the runs whose seed is in `seeds` (when given) and whose axes match every
    selector, and all the others. Either set empty is an error saying what each selection held."""
    if seeds is None and not selectors:
        raise ValueError("say which runs calibrate: --calibrate-seeds and/or --calibrate-on AXIS=VALUE")

    def chosen(c: Case) -> bool:
        in_seeds = seeds is None or int(c.axes["seed"]) in seeds
        return in_seeds and all(c.axes.get(a) == v for a, v in selectors)

    calib = [c for c in cases if chosen(c)]
    held = [c for c in cases if not chosen(c)]
    if not calib or not held:
        raise ValueError(
            f"seeds {seeds} and {selectors} select {len(calib)} calibration and {len(held)} held-out runs "
            f"of {len(cases)}: both must be some"
        )
    return calib, held


def case_signals(case: Case, thresholds: dict[str, Any]) -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
    """Each detector's (steps, values) per role of a run, under `thresholds` (the trainer's definitions)."""
    out: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for _, rows in case.roles:
        steps = rows["step"].to_numpy(dtype=float)
        for name, values in ew.role_signals(rows, thresholds).items():
            out.setdefault(name, []).append((steps, np.asarray(values, dtype=float)))
    return out


def oriented(values: np.ndarray, above: bool) -> np.ndarray:
    """Values turned so that a detector fires at or above a threshold (at-or-below ones negated)."""
    return values if above else -values


def extreme(per_role: list[tuple[np.ndarray, np.ndarray]], above: bool, until: float = math.inf) -> float:
    """The oriented signal's highest value over the roles at steps <= `until` (-inf: none)."""
    best = -math.inf
    for steps, values in per_role:
        v = oriented(values[steps <= until], above)
        v = v[np.isfinite(v)]
        if len(v):
            best = max(best, float(v.max()))
    return best


def first_firing(per_role: list[tuple[np.ndarray, np.ndarray]], threshold: float, above: bool) -> float:
    """The first step any role fires at `threshold` (NaN: never): the run's first warning onset."""
    firsts = [steps[ew.fires(values, threshold, above)] for steps, values in per_role]
    found = [float(f[0]) for f in firsts if len(f)]
    return min(found) if found else math.nan


def sweep(cases: list[Case], signals: list[dict], detector: ew.Detector, min_lead_evals: float) -> pd.DataFrame:
    """Recall and false-alarm rate on `cases` at every grid threshold (oriented: fires at or above `level`)."""
    cliff_keys, healthy_keys = [], []
    for case, sig in zip(cases, signals):
        per_role = sig.get(detector.name, [])
        if case.cliff:
            cliff_keys.append(extreme(per_role, detector.above, case.deadline(min_lead_evals)))
        else:
            healthy_keys.append(extreme(per_role, detector.above))
    cliff_keys, healthy_keys = np.array(cliff_keys), np.array(healthy_keys)
    grid = np.unique(np.concatenate([cliff_keys, healthy_keys]))
    grid = grid[np.isfinite(grid)]
    rows = [
        {
            "detector": detector.name,
            "level": float(g),
            "lower": float(grid[i - 1]) if i else math.nan,  # the next grid value down: warns more runs
            "recall": float((cliff_keys >= g).mean()) if len(cliff_keys) else math.nan,
            "false_alarm_rate": float((healthy_keys >= g).mean()) if len(healthy_keys) else math.nan,
        }
        for i, g in enumerate(grid)
    ]
    return pd.DataFrame(rows, columns=["detector", "level", "lower", "recall", "false_alarm_rate"])


def choose(grid: pd.DataFrame, detector: ew.Detector, max_false_alarm: float) -> float:
    """The calibrated threshold (in the detector's own sign) from its sweep; NaN when none warns a cliff
    within the false-alarm bound."""
    ok = grid[(grid["false_alarm_rate"] <= max_false_alarm + 1e-12) & (grid["recall"] > 0)]
    if ok.empty:
        return math.nan
    best = ok.sort_values(["recall", "false_alarm_rate", "level"], ascending=[False, True, True]).iloc[0]
    level = best["level"]
    if not detector.discrete and np.isfinite(best["lower"]):
        level = (best["level"] + best["lower"]) / 2  # halfway to the value that would warn one more run
    return float(level if detector.above else -level)


def median_lead_ci(leads: np.ndarray, n_boot: int, seed: int) -> tuple[float, float, float]:
    """Median of `leads` with its 95% percentile bootstrap interval over the runs (NaN, NaN under 2)."""
    if not len(leads):
        return math.nan, math.nan, math.nan
    lo, hi = bootstrap_stat_ci(
        lambda idx: np.median(leads[idx], axis=1), len(leads), np.random.default_rng(seed), n_boot
    )
    return float(np.median(leads)), lo, hi


def judge(
    cases: list[Case],
    signals: list[dict],
    detector: ew.Detector,
    threshold: float,
    min_lead_evals: float,
    n_boot: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """A detector at `threshold` judged on `cases`: recall, false-alarm rate and median lead with intervals."""
    warned, n_cliff, reachable, alarms, n_healthy, onsets = [], 0, 0, 0, 0, 0
    for case, sig in zip(cases, signals):
        per_role = sig.get(detector.name, []) if math.isfinite(threshold) else []
        first = first_firing(per_role, threshold, detector.above)
        if case.cliff:
            n_cliff += 1
            reachable += case.deadline(min_lead_evals) >= case.first_step
            if first <= case.deadline(min_lead_evals):
                warned.append((case.cliff_step - first, case.eval_every))
        else:
            n_healthy += 1
            alarms += not math.isnan(first)
            onsets += sum(int(_onsets(v, threshold, detector.above)) for _, v in per_role)
    steps = np.array([w[0] for w in warned])
    evals = np.array([w[0] / w[1] for w in warned])
    rec_lo, rec_hi = wilson(len(warned), n_cliff)
    fa_lo, fa_hi = wilson(alarms, n_healthy)
    lead_s, lead_s_lo, lead_s_hi = median_lead_ci(steps, n_boot, seed)
    lead_e, lead_e_lo, lead_e_hi = median_lead_ci(evals, n_boot, seed)
    return {
        "warned": len(warned),
        "n_cliffs": n_cliff,
        "n_cliffs_reachable": reachable,
        "recall": len(warned) / n_cliff if n_cliff else math.nan,
        "recall_lo": rec_lo,
        "recall_hi": rec_hi,
        "false_alarms": alarms,
        "n_healthy": n_healthy,
        "false_alarm_rate": alarms / n_healthy if n_healthy else math.nan,
        "false_alarm_lo": fa_lo,
        "false_alarm_hi": fa_hi,
        "alarms_per_healthy_run": onsets / n_healthy if n_healthy else math.nan,
        "median_lead_steps": lead_s,
        "lead_steps_lo": lead_s_lo,
        "lead_steps_hi": lead_s_hi,
        "median_lead_evals": lead_e,
        "lead_evals_lo": lead_e_lo,
        "lead_evals_hi": lead_e_hi,
    }


def _onsets(values: np.ndarray, threshold: float, above: bool) -> int:
    """How many firing stretches begin in one role's signal."""
    hit = ew.fires(values, threshold, above)
    return int((hit & ~np.concatenate([[False], hit[:-1]])).sum())
