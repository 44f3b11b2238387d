"""Errors before work over the matrix: every run whose rollout backend cannot start, at `snakemake -n`.

`check_matrix` runs in Snakemake's process (rules/common.smk) over every run of the matrix; the checks of
one run are trainer.rl.preflight's (`run_problems`), which the job makes again before the model loads.
"""

from __future__ import annotations

from typing import Any

from trainer.contract.config import ConfigError
from trainer.rl.preflight import run_problems
from trainer.sweep.config import expand_matrix, resolve_run_config


def check_matrix(config: dict[str, Any]) -> None:
    """Raise ConfigError listing every run of the matrix whose rollout backend cannot start."""
    lines = []
    for run in expand_matrix(config):
        rc = resolve_run_config(config, run)
        lines += [f"run {run}: {p}" for p in run_problems(rc)]
    if lines:
        raise ConfigError("rollout backend cannot start:\n  " + "\n  ".join(lines))
