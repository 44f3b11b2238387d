"""The analysis's settings (config.yaml's `analysis` section), typed: the one home of their defaults, help
and constraints (rules/config.schema.yaml's `analysis` is generated from them).

A run's own settings are read from its config.json through the trainer's typed settings, whose defaults
stand where a config.json lacks a key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from analysis.signatures import DEFAULT_THRESHOLDS
from trainer.contract import rundir
from trainer.settings import TrainingSettings, default_of, from_dict, setting


@dataclass(frozen=True)
class AnalysisSettings:
    """Metric definitions of the analysis (docs/evaluation.md), with the study's values as defaults."""

    smoothing_window: int = setting(
        rundir.SMOOTHING_WINDOW,
        "Evals in the trailing moving average for the peak: one noisy eval is no peak (the trainer keeps it).",
        ge=1,
    )
    terminal_k: int = setting(3, "Evals averaged for terminal accuracy (terminal_acc: the mean of the last k).", ge=1)
    cliff_drop: float = setting(0.1, "A cliff: peak - terminal >= cliff_drop, sustained to the end.", gt=0)
    capture_share: float = setting(
        0.6, "A shared policy is captured when one role holds this share of its squared gradient.", gt=0, le=1
    )
    capture_trend_fraction: float = setting(
        0.2, "The capture trend is fitted over this fraction of training before a cliff.", gt=0, le=1
    )
    bootstrap_n: int = setting(2000, "Bootstrap resamples of the Isolated-Shared differences.", ge=100)
    bootstrap_seed: int = setting(0, "Seed of those resamples (tables are reproducible).", ge=0)
    variance_interactions: bool = setting(True, "The variance decomposition adds two-way interactions.")
    signatures: dict[str, float] = setting(
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
        return from_dict(cls, data or {}, "analysis")


def eval_every(run_config: dict[str, Any]) -> float:
    """A run's training.eval_every from its config.json (the typed default where it lacks the key)."""
    return float(run_config["training"].get("eval_every", default_of(TrainingSettings, "eval_every")))
