"""How many data-parallel processes a run has, from its `resources` (the launcher and `distributed` read it)."""

from __future__ import annotations

from typing import Any

from trainer import settings
from trainer.contract.config import ConfigError


def world_size_of(resources: dict[str, Any]) -> int:
    """A run's data-parallel process count: one per GPU (`resources.gpus`), else `resources.processes`
    (default 1). The one place that reads resources.processes (launcher and trainer/rl/distributed.py)."""
    res = settings.from_dict(settings.ResourceSettings, resources, "resources")
    gpus, processes = res.gpus, res.processes
    if processes < 1:
        raise ConfigError(f"resources.processes: {processes}; at least 1")
    if gpus and processes not in (1, gpus):
        raise ConfigError(
            f"resources.processes: {processes} with resources.gpus: {gpus}; a GPU run has one "
            f"process per GPU: drop resources.processes or set it to {gpus}"
        )
    return gpus or processes
