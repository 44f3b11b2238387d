"""What a run writes to disk, before it runs: one checkpoint, the most its checkpoints hold at once, its logs.

A run keeps `keep_last` checkpoints (each of trainer.models.size.checkpoint_bytes), writes the next one
before it removes the oldest, and keeps the peak's policies beside them (no optimizer state): its peak
disk use. Logs: the samples kept per eval (their text, ~4 bytes a token) and a few KiB of metrics per
step and role.
"""

from __future__ import annotations

import math
from typing import Any

from trainer.models.size import PARAM_BYTES, STATE_BYTES, checkpoint_bytes, model_shape
from trainer.sweep.cost import eval_count, training_of
from trainer.workflows import workflow_class

TEXT_BYTES_PER_TOKEN = 4
METRIC_BYTES_PER_STEP_ROLE = 4096


def run_disk(run_config: dict[str, Any], scale: dict[str, Any]) -> dict[str, float]:
    """A run's checkpoint, peak-checkpoint-use and log bytes (NaN where the model's shape is unknown)."""
    shape = model_shape(scale)
    t = training_of(run_config)
    if shape is None:
        return {"checkpoint_gb": math.nan, "disk_peak_gb": math.nan, "log_gb": math.nan}
    one = checkpoint_bytes(run_config, shape)
    peak_policies = one * PARAM_BYTES / (PARAM_BYTES + STATE_BYTES)
    cls = workflow_class(run_config["workflow"], run_config["workflow_params"])
    turns = cls.max_turns(run_config["workflow_params"])
    samples = eval_count(t) * t.samples_per_eval * turns * t.max_completion_length * TEXT_BYTES_PER_TOKEN
    metrics = t.max_steps * len(cls.roles) * METRIC_BYTES_PER_STEP_ROLE
    return {
        "checkpoint_gb": one / 1e9,
        "disk_peak_gb": ((t.keep_last + 1) * one + peak_policies) / 1e9,
        "log_gb": (samples + metrics) / 1e9,
    }
