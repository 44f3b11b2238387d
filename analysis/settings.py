"""The analysis's settings (config.yaml's `analysis` section), typed: the one home of their defaults.

Analysis imports nothing from the trainer but the run-directory contract, so it has its own
settings dataclass; tests/test_config_schema.py checks it names the schema's `analysis` keys.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from analysis.signatures import DEFAULT_THRESHOLDS
from trainer.contract import rundir


def _setting(default: Any, help: str) -> Any:  # noqa: A002 (the dataclass-field `help` convention of TRL)
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class AnalysisSettings:
    """Metric definitions of the analysis (docs/evaluation.md), with the study's values as defaults."""

    smoothing_window: int = _setting(
        rundir.SMOOTHING_WINDOW,
        "Evals in the trailing moving average for the peak: one noisy eval is no peak (the trainer keeps it).",
    )
    terminal_k: int = _setting(3, "terminal_acc is the mean of the last k evals.")
    cliff_drop: float = _setting(0.1, "A cliff: peak - terminal >= cliff_drop, sustained to the end.")
    capture_share: float = _setting(
        0.6, "A shared policy is captured when one role holds this share of its squared gradient."
    )
    capture_trend_fraction: float = _setting(
        0.2, "The capture trend is fitted over this fraction of training before a cliff."
    )
    bootstrap_n: int = _setting(2000, "Bootstrap resamples of the Isolated-Shared differences.")
    bootstrap_seed: int = _setting(0, "Seed of those resamples (tables are reproducible).")
    variance_interactions: bool = _setting(True, "The variance decomposition adds two-way interactions.")
    signatures: dict[str, float] = _setting(
        {}, "Thresholds of the failure signatures, over analysis/signatures.py DEFAULT_THRESHOLDS."
    )

    def __post_init__(self) -> None:
        unknown = sorted(set(self.signatures) - set(DEFAULT_THRESHOLDS))
        if unknown:
            raise ValueError(
                f"analysis.signatures: unknown threshold(s) {unknown}; known are {sorted(DEFAULT_THRESHOLDS)}"
            )
        if self.smoothing_window < 1 or self.terminal_k < 1:
            raise ValueError(
                f"analysis.smoothing_window ({self.smoothing_window}) and analysis.terminal_k "
                f"({self.terminal_k}) must be at least 1"
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> AnalysisSettings:
        """Settings of config.yaml's `analysis` section; an unknown key is an error naming it."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data or {}) - names)
        if unknown:
            raise ValueError(f"analysis.{unknown[0]}: unknown key (allowed here: {', '.join(sorted(names))})")
        return cls(**(data or {}))


def eval_every(run_config: dict[str, Any]) -> float:
    """A run's training.eval_every from its config.json (1 where an old config.json lacks it)."""
    return float(run_config["training"].get("eval_every", 1))


def workflow_params(run_config: dict[str, Any]) -> dict[str, Any]:
    """A run's workflow parameters from its config.json (none where an old config.json lacks them)."""
    return run_config.get("workflow_params", {})
