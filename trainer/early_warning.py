"""Early-warning detectors: signals in a run's per-role train logs that may announce a cliff.

Each detector turns a role's train rows (one row per step) into a per-step value and fires where that
value crosses its threshold (config.yaml `training.early_warning`, typed in
trainer.settings.EarlyWarningSettings). A warning is the onset of a firing stretch: the first step it
fires after a step it did not. The trainer (each step) and the calibration (analysis/calibrate.py,
replaying finished runs) both call `role_signals`, so the two read one definition. Each detector's
definition carries its own version (DETECTOR_VERSIONS, written to every row of warnings.parquet):
change a definition, bump its version.

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
- train_inference_mismatch: mean |log p_engine - log p_trainer| (train.parquet's logp_mismatch, vLLM
  backend); fires at or above `train_inference_mismatch`.
- length_surge: the role's mean completion length (trailing mean) over the smallest trailing mean
  it has had since its first `baseline_steps` steps (the running baseline); fires at or above
  `length_surge_ratio`.
- entropy_reward: entropy spent without reward bought: the relative drop of the trailing entropy
  from its baseline mean (1 - H / H0) minus the rise of the trailing reward from its baseline mean
  (R - R0, rewards in [0, 1]), baselines over the first `baseline_steps` steps; fires at or above
  `entropy_reward_gap`.
- reward_drop: the highest trailing-mean reward so far minus the trailing mean now; fires at or
  above `reward_drop`.
- clip_ratio: the share of tokens whose importance ratio left the clip range (trailing mean); fires
  at or above `clip_ratio`.
- kl: the per-token KL to the reference policy (trailing mean; NaN where beta is 0); fires at or
  above `kl`.
- combined: how many of the `combine` detectors fired on the role in the last `combine_window`
  steps (each at its own threshold); fires at or above `combine_k`.
A column absent from the logs (or all NaN for a role) silences the detectors that read it for that role.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from trainer.contract import rundir
from trainer.settings import EarlyWarningSettings, SettingsError, from_dict

DEFAULT_THRESHOLDS: dict[str, Any] = dataclasses.asdict(EarlyWarningSettings())  # their home: trainer.settings
COMBINED = "combined"


def trailing_mean(x: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last `window` values at each step (fewer at the start), NaNs ignored."""
    return pd.Series(x, dtype=float).rolling(int(window), min_periods=1).mean().to_numpy()


def baseline_mean(x: np.ndarray, baseline_steps: int) -> float:
    """Mean of the first `baseline_steps` values (NaN when there are not more values than that)."""
    x = np.asarray(x, dtype=float)
    n = int(baseline_steps)
    if len(x) <= n or not np.isfinite(x[:n]).any():
        return float("nan")
    return float(np.nanmean(x[:n]))


def ratio_to_baseline(x: np.ndarray, window: int, baseline_steps: int) -> np.ndarray:
    """Trailing mean over the mean of the first `baseline_steps` values (NaN before the baseline exists)."""
    x = np.asarray(x, dtype=float)
    out = np.full(len(x), np.nan)
    base = baseline_mean(x, baseline_steps)
    if not np.isfinite(base) or base <= 0:
        return out
    n = int(baseline_steps)
    out[n:] = trailing_mean(x, window)[n:] / base
    return out


def spike_ratio(x: np.ndarray, window: int) -> np.ndarray:
    """Each value over the median of the previous `window` values (NaN until there are `window`)."""
    x = np.asarray(x, dtype=float)
    w = int(window)
    baseline = pd.Series(x).shift(1).rolling(w, min_periods=w).median().to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(baseline > 0, x / baseline, np.nan)


def over_running_min(x: np.ndarray, window: int, baseline_steps: int) -> np.ndarray:
    """Trailing mean over the smallest trailing mean from step `baseline_steps` on (NaN before it)."""
    m = trailing_mean(x, window)
    out = np.full(len(m), np.nan)
    n = max(int(baseline_steps) - 1, 0)
    if len(m) <= n:
        return out
    floor = pd.Series(m[n:]).cummin().to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        out[n:] = np.where(floor > 0, m[n:] / floor, np.nan)
    return out


def drop_from_running_max(x: np.ndarray, window: int) -> np.ndarray:
    """The highest trailing mean so far minus the trailing mean now."""
    m = trailing_mean(x, window)
    return pd.Series(m).cummax().to_numpy() - m


def entropy_reward_gap(entropy: np.ndarray, reward: np.ndarray, window: int, baseline_steps: int) -> np.ndarray:
    """(1 - H / H0) - (R - R0) of the trailing means against their baseline means (NaN before them)."""
    h0, r0 = baseline_mean(entropy, baseline_steps), baseline_mean(reward, baseline_steps)
    out = np.full(len(entropy), np.nan)
    if not (np.isfinite(h0) and h0 > 0 and np.isfinite(r0)):
        return out
    n = int(baseline_steps)
    out[n:] = (1 - trailing_mean(entropy, window)[n:] / h0) - (trailing_mean(reward, window)[n:] - r0)
    return out


Signal = Callable[[pd.DataFrame, dict[str, Any]], np.ndarray]


def _col(name: str) -> Callable[[pd.DataFrame], np.ndarray]:
    return lambda rows: rows[name].to_numpy(dtype=float)


def _trailing(column: str) -> Signal:
    return lambda rows, t: trailing_mean(_col(column)(rows), t["window"])


@dataclass(frozen=True)
class Detector:
    """One early-warning signal: `signal(role rows, settings)` per step, firing at or above (`above`) or
    at or below its threshold `settings[threshold_key]`; `version` numbers its definition."""

    name: str
    columns: tuple[str, ...]
    threshold_key: str
    above: bool
    signal: Signal
    version: int = 1
    shared_policy_only: bool = False
    discrete: bool = False  # integer-valued (a count): its calibrated threshold is a value it takes


SINGLE_DETECTORS = [
    Detector(
        "entropy_collapse",
        ("entropy",),
        "entropy_ratio",
        False,
        lambda r, t: ratio_to_baseline(_col("entropy")(r), t["window"], t["baseline_steps"]),
    ),
    Detector(
        "advantage_collapse", ("zero_var_group_share",), "zero_var_group_share", True, _trailing("zero_var_group_share")
    ),
    Detector(
        "grad_norm_spike",
        ("grad_norm",),
        "grad_spike_ratio",
        True,
        lambda r, t: spike_ratio(_col("grad_norm")(r), t["window"]),
    ),
    Detector("capture", ("grad_sq_share",), "capture_share", True, _trailing("grad_sq_share"), shared_policy_only=True),
    Detector("amplification", ("amplification_index",), "amplification_index", True, _trailing("amplification_index")),
    Detector(
        "train_inference_mismatch", ("logp_mismatch",), "train_inference_mismatch", True, _trailing("logp_mismatch")
    ),
    Detector(
        "length_surge",
        ("completion_len_mean",),
        "length_surge_ratio",
        True,
        lambda r, t: over_running_min(_col("completion_len_mean")(r), t["window"], t["baseline_steps"]),
    ),
    Detector(
        "entropy_reward",
        ("entropy", "reward_mean"),
        "entropy_reward_gap",
        True,
        lambda r, t: entropy_reward_gap(_col("entropy")(r), _col("reward_mean")(r), t["window"], t["baseline_steps"]),
    ),
    Detector(
        "reward_drop",
        ("reward_mean",),
        "reward_drop",
        True,
        lambda r, t: drop_from_running_max(_col("reward_mean")(r), t["window"]),
    ),
    Detector("clip_ratio", ("clip_ratio",), "clip_ratio", True, _trailing("clip_ratio")),
    Detector("kl", ("kl",), "kl", True, _trailing("kl")),
]
SINGLE_NAMES = [d.name for d in SINGLE_DETECTORS]
# the k-of-n combination: its signal is computed from the single detectors' firing (combined_signal)
COMBINED_DETECTOR = Detector(COMBINED, (), "combine_k", True, lambda r, t: np.full(len(r), np.nan), discrete=True)
DETECTORS = [*SINGLE_DETECTORS, COMBINED_DETECTOR]
DETECTOR_NAMES = [d.name for d in DETECTORS]
BY_NAME = {d.name: d for d in DETECTORS}
DETECTOR_VERSIONS: dict[str, int] = {d.name: d.version for d in DETECTORS}
assert tuple(DETECTOR_NAMES) == rundir.EARLY_WARNING_DETECTORS, "rundir's contract lists the detectors"


def thresholds_of(training: dict[str, Any]) -> dict[str, Any]:
    """The detectors' settings: `training.early_warning` over the defaults, read into
    EarlyWarningSettings (an unknown key or combined detector is an error naming its key path)."""
    try:
        typed = from_dict(EarlyWarningSettings, training.get("early_warning") or {}, "training.early_warning")
    except SettingsError as e:
        raise ValueError(str(e)) from e
    return checked(dataclasses.asdict(typed))


def checked(thresholds: dict[str, Any]) -> dict[str, Any]:
    """`thresholds` over the defaults, its `combine` list checked against the single detectors."""
    t = {**DEFAULT_THRESHOLDS, **thresholds}
    unknown = sorted(set(t["combine"]) - set(SINGLE_NAMES))
    if unknown:
        raise ValueError(f"training.early_warning.combine: unknown detector(s) {unknown}; known are {SINGLE_NAMES}")
    return t


def fires(values: np.ndarray, threshold: float, above: bool) -> np.ndarray:
    """Where a detector fires (NaN never does)."""
    v = np.asarray(values, dtype=float)
    with np.errstate(invalid="ignore"):
        hit = v >= threshold if above else v <= threshold
    return hit & np.isfinite(v)


def combined_signal(firing: dict[str, np.ndarray], members: list[str], window: int) -> np.ndarray:
    """Per step: how many of `members` fired in the last `window` steps (NaN when none of them applies)."""
    present = [firing[m] for m in members if m in firing]
    if not present:
        return np.full(len(next(iter(firing.values()))) if firing else 0, np.nan)
    recent = [pd.Series(f.astype(float)).rolling(int(window), min_periods=1).max().to_numpy() for f in present]
    return np.sum(recent, axis=0)


def role_signals(role_rows: pd.DataFrame, thresholds: dict[str, Any]) -> dict[str, np.ndarray]:
    """Each applicable detector's per-step value for one role's rows (sorted by step, skipped steps out)."""
    shared = "n_roles_on_policy" in role_rows and bool((role_rows["n_roles_on_policy"] > 1).any())
    out = {}
    for d in SINGLE_DETECTORS:
        absent = any(c not in role_rows or role_rows[c].isna().all() for c in d.columns)
        if absent or (d.shared_policy_only and not shared):
            continue
        out[d.name] = d.signal(role_rows, thresholds)
    if out:
        firing = {n: fires(v, thresholds[BY_NAME[n].threshold_key], BY_NAME[n].above) for n, v in out.items()}
        combined = combined_signal(firing, list(thresholds["combine"]), thresholds["combine_window"])
        if np.isfinite(combined).any():
            out[COMBINED] = combined
    return out


def role_frames(train: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """A run's train rows per role, in step order, skipped steps left out (their metrics are not an
    update's), with `n_roles_on_policy` (how many roles train the row's policy at that step)."""
    train = train[~train["skipped"].astype(bool)] if "skipped" in train else train
    if "policy" in train:
        train = train.assign(n_roles_on_policy=train.groupby(["step", "policy"])["role"].transform("nunique"))
    ordered = train.sort_values("step", kind="stable")
    return [(str(role), g.reset_index(drop=True)) for role, g in ordered.groupby("role", sort=False)]


def warnings_from_train(train: pd.DataFrame, thresholds: dict[str, Any] | None = None) -> pd.DataFrame:
    """Every warning of a run's train log (one row per detector onset): step, role, detector, value,
    threshold, version (the detector's definition version)."""
    t = checked(thresholds or {})
    rows = []
    for role, g in role_frames(train):
        steps = g["step"].to_numpy()
        for name, values in role_signals(g, t).items():
            d = BY_NAME[name]
            hit = fires(values, t[d.threshold_key], d.above)
            onset = hit & ~np.concatenate([[False], hit[:-1]])
            rows += [
                {
                    "step": int(steps[i]),
                    "role": role,
                    "detector": name,
                    "value": float(values[i]),
                    "threshold": float(t[d.threshold_key]),
                    "version": d.version,
                }
                for i in np.flatnonzero(onset)
            ]
    cols = ["step", "role", "detector", "value", "threshold", "version"]
    return pd.DataFrame(rows, columns=cols).sort_values(["step", "role", "detector"], kind="stable", ignore_index=True)


def warnings_at(train_rows: list[dict[str, Any]], step: int, thresholds: dict[str, Any]) -> list[dict[str, Any]]:
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
