"""Early-warning detectors: signals in a run's per-role train logs that may announce a cliff.

Each detector turns one column of a role's train rows (one row per step) into a per-step value and
fires where that value crosses its threshold (config.yaml `training.early_warning`). A warning is the
onset of a firing stretch: the first step it fires after a step it did not. The definitions below
are versioned like the cliff's: change one, bump EARLY_WARNING_VERSION (it is written to every row
of warnings.parquet).

- entropy_collapse: the role's token entropy (trailing mean over `window` steps) as a fraction of
  its mean over the first `baseline_steps` steps; fires at or below `entropy_ratio`.
- advantage_collapse: the share of the role's GRPO groups whose rewards all agree (zero
  advantage), trailing mean; fires at or above `zero_var_group_share`.
- grad_norm_spike: the role's gradient norm over the median of its previous `window` steps (the
  running baseline); fires at or above `grad_spike_ratio`.
- capture: on a policy shared by several roles, the role's share of the squared gradient (trailing
  mean); fires at or above `capture_share` (analysis.capture_share's meaning).
- amplification: the amplification index sum_k ||g_k|| / ||sum_k g_k|| of a role's parallel agents
  (trailing mean), where train.parquet has it; fires at or above `amplification_index`.
- train_inference_mismatch: mean |log p_engine - log p_trainer| (train.parquet`s logp_mismatch, vLLM backend);
  fires at or above `train_inference_mismatch`.
A column absent from the logs (or all NaN for a role) silences its detector for that role.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from trainer.contract import rundir
from trainer.settings import EarlyWarningSettings, SettingsError, TrainingSettings, default_of, from_dict

EARLY_WARNING_VERSION = 1

DEFAULT_THRESHOLDS: dict[str, float] = dataclasses.asdict(EarlyWarningSettings())  # their home: trainer.settings
ON_WARNING = ("log", "stop")


def trailing_mean(x: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last `window` values at each step (fewer at the start), NaNs ignored."""
    return pd.Series(x, dtype=float).rolling(int(window), min_periods=1).mean().to_numpy()


def ratio_to_baseline(x: np.ndarray, window: int, baseline_steps: int) -> np.ndarray:
    """Trailing mean over the mean of the first `baseline_steps` values (NaN before the baseline exists)."""
    x = np.asarray(x, dtype=float)
    n = int(baseline_steps)
    out = np.full(len(x), np.nan)
    if len(x) <= n:
        return out
    base = np.nanmean(x[:n]) if np.isfinite(x[:n]).any() else np.nan
    if not np.isfinite(base) or base <= 0:
        return out
    out[n:] = trailing_mean(x, window)[n:] / base
    return out


def spike_ratio(x: np.ndarray, window: int) -> np.ndarray:
    """Each value over the median of the previous `window` values (NaN until there are `window`)."""
    x = np.asarray(x, dtype=float)
    w = int(window)
    baseline = pd.Series(x).shift(1).rolling(w, min_periods=w).median().to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(baseline > 0, x / baseline, np.nan)


@dataclass(frozen=True)
class Detector:
    """One early-warning signal: `signal(column values, thresholds)` per step, firing at or above
    (`above`) or at or below its threshold `thresholds[name of the threshold]`."""

    name: str
    column: str
    threshold_key: str
    above: bool
    signal: Callable[[np.ndarray, dict[str, float]], np.ndarray]
    shared_policy_only: bool = False


DETECTORS = [
    Detector(
        "entropy_collapse",
        "entropy",
        "entropy_ratio",
        False,
        lambda x, t: ratio_to_baseline(x, t["window"], t["baseline_steps"]),
    ),
    Detector(
        "advantage_collapse",
        "zero_var_group_share",
        "zero_var_group_share",
        True,
        lambda x, t: trailing_mean(x, t["window"]),
    ),
    Detector("grad_norm_spike", "grad_norm", "grad_spike_ratio", True, lambda x, t: spike_ratio(x, t["window"])),
    Detector(
        "capture",
        "grad_sq_share",
        "capture_share",
        True,
        lambda x, t: trailing_mean(x, t["window"]),
        shared_policy_only=True,
    ),
    Detector(
        "amplification", "amplification_index", "amplification_index", True, lambda x, t: trailing_mean(x, t["window"])
    ),
    Detector(
        "train_inference_mismatch",
        "logp_mismatch",
        "train_inference_mismatch",
        True,
        lambda x, t: trailing_mean(x, t["window"]),
    ),
]
DETECTOR_NAMES = [d.name for d in DETECTORS]
assert tuple(DETECTOR_NAMES) == rundir.EARLY_WARNING_DETECTORS, "rundir's contract lists the detectors"


def thresholds_of(training: dict[str, Any]) -> dict[str, float]:
    """The detectors' thresholds: `training.early_warning` over the defaults (unknown keys are errors,
    named by key path; the defaults live in trainer.settings.EarlyWarningSettings)."""
    given = training.get("early_warning") or {}
    try:
        return dataclasses.asdict(from_dict(EarlyWarningSettings, given, "training.early_warning"))
    except SettingsError as e:
        raise ValueError(str(e)) from e


def on_warning_of(training: dict[str, Any]) -> str:
    """`training.on_warning`: log (default) or stop (checkpoint and end the run as done-early)."""
    mode = training.get("on_warning", default_of(TrainingSettings, "on_warning"))
    if mode not in ON_WARNING:
        raise ValueError(f"training.on_warning: {mode!r} is not one of {ON_WARNING}")
    return mode


def fires(values: np.ndarray, threshold: float, above: bool) -> np.ndarray:
    """Where a detector fires (NaN never does)."""
    v = np.asarray(values, dtype=float)
    with np.errstate(invalid="ignore"):
        hit = v >= threshold if above else v <= threshold
    return hit & np.isfinite(v)


def role_signals(role_rows: pd.DataFrame, thresholds: dict[str, float]) -> dict[str, np.ndarray]:
    """Each applicable detector's per-step value for one role's rows (sorted by step)."""
    shared = "n_roles_on_policy" in role_rows and bool((role_rows["n_roles_on_policy"] > 1).any())
    out = {}
    for d in DETECTORS:
        if d.column not in role_rows or role_rows[d.column].isna().all() or (d.shared_policy_only and not shared):
            continue
        out[d.name] = d.signal(role_rows[d.column].to_numpy(dtype=float), thresholds)
    return out


def warnings_from_train(train: pd.DataFrame, thresholds: dict[str, float] | None = None) -> pd.DataFrame:
    """Every warning of a run's train log (one row per detector onset): step, role, detector, value,
    threshold, version. Skipped steps are left out (their metrics are not an update's)."""
    t = {**DEFAULT_THRESHOLDS, **(thresholds or {})}
    by_name = {d.name: d for d in DETECTORS}
    train = train[~train["skipped"].astype(bool)] if "skipped" in train else train
    if "policy" in train:
        train = train.assign(n_roles_on_policy=train.groupby(["step", "policy"])["role"].transform("nunique"))
    rows = []
    for role, g in train.sort_values("step", kind="stable").groupby("role", sort=False):
        steps = g["step"].to_numpy()
        for name, values in role_signals(g, t).items():
            d = by_name[name]
            hit = fires(values, t[d.threshold_key], d.above)
            onset = hit & ~np.concatenate([[False], hit[:-1]])
            rows += [
                {
                    "step": int(steps[i]),
                    "role": role,
                    "detector": name,
                    "value": float(values[i]),
                    "threshold": float(t[d.threshold_key]),
                    "version": EARLY_WARNING_VERSION,
                }
                for i in np.flatnonzero(onset)
            ]
    cols = ["step", "role", "detector", "value", "threshold", "version"]
    return pd.DataFrame(rows, columns=cols).sort_values(["step", "role", "detector"], kind="stable", ignore_index=True)


def warnings_at(train_rows: list[dict[str, Any]], step: int, thresholds: dict[str, float]) -> list[dict[str, Any]]:
    """The warnings whose onset is `step`, from the train rows so far (what the trainer calls each step)."""
    if not train_rows:
        return []
    found = warnings_from_train(pd.DataFrame(train_rows), thresholds)
    return found[found["step"] == step].to_dict("records")


def zero_variance_share(rewards_by_group: dict[Any, list[float]]) -> float:
    """Share of GRPO groups (of one role) whose rewards all agree; NaN without a group of two or more."""
    groups = [r for r in rewards_by_group.values() if len(r) > 1]
    if not groups:
        return float("nan")
    return sum(max(r) - min(r) == 0 for r in groups) / len(groups)


def zero_variance_shares(episodes: list[Any], group_of: list[int]) -> dict[str, float]:
    """Per role: the share of its groups (prompt x role instance, across the rollouts: the study's GRPO
    groups) whose turns' rewards all agree, so that their advantages are zero."""
    groups: dict[str, dict[Any, list[float]]] = {}
    for g, ep in zip(group_of, episodes):
        for t in ep.turns:
            groups.setdefault(t.role, {}).setdefault((g, t.agent), []).append(float(t.reward))
    return {role: zero_variance_share(by_group) for role, by_group in groups.items()}
