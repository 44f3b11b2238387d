"""Errors before work over the matrix: every run whose rollout backend cannot start, at `snakemake -n`.

`check_matrix` runs in Snakemake's process (rules/common.smk) over every run of the matrix; the checks of
one run are trainer.rl.preflight's (`run_problems`), which the job makes again before the model loads.
"""

from __future__ import annotations

from typing import Any

from trainer.contract.config import ConfigError
from trainer.contract.runid import RunId
from trainer.rl.preflight import run_problems
from trainer.sweep.config import resolve_matrix, run_cells


def check_matrix(config: dict[str, Any], resolved: dict[RunId, dict[str, Any]] | None = None) -> None:
    """Raise ConfigError listing every run of the matrix whose rollout backend cannot start. `resolved`:
    resolve_matrix's (default: the matrix in use); a cell's runs differ in their seed alone, which no check
    reads, so each cell is checked once and its problems named for each of its runs."""
    lines = []
    for run_config, runs in run_cells(resolve_matrix(config) if resolved is None else resolved):
        problems = run_problems(run_config)
        lines += [f"run {run}: {p}" for run in runs for p in problems]
    if lines:
        raise ConfigError("rollout backend cannot start:\n  " + "\n  ".join(lines))
