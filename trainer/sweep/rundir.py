"""The run directory and its parquet schemas: the contract between trainer and analysis.

Analysis imports this module and nothing else from the trainer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

CONFIG_JSON = "config.json"
TRAIN_PARQUET = "train.parquet"
EVAL_PARQUET = "eval.parquet"
SAMPLES_PARQUET = "samples.parquet"
DONE_JSON = "done.json"
WARNINGS_PARQUET = "warnings.parquet"  # early-warning events (trainer/rl/early_warning.py)
WORK_DIR = "work"
# Under work/ (not read by analysis): the trainer's progress and last failure, for `trainer status`,
# and the lock a training process holds.
PROGRESS_JSON = "progress.json"
FAILURE_JSON = "failure.json"
TRAIN_LOCK = "train.lock"

# One row per (step, role). grad_* are this role's contribution to its policy's gradient, pre-clip.
TRAIN_SCHEMA = pa.schema([
    ("step", pa.int64()),
    ("role", pa.string()),
    ("policy", pa.string()),
    ("n_turns", pa.int64()),
    ("n_tokens", pa.int64()),
    ("reward_mean", pa.float64()),
    ("reward_std", pa.float64()),
    ("adv_abs_mean", pa.float64()),
    ("loss", pa.float64()),
    ("grad_norm", pa.float64()),
    ("grad_sq_share", pa.float64()),
    ("grad_cos_others", pa.float64()),  # cosine with the other roles' gradient on the same policy
    ("entropy", pa.float64()),
    ("kl", pa.float64()),
    ("clip_ratio", pa.float64()),
    ("completion_len_mean", pa.float64()),
    ("lr", pa.float64()),
    ("skipped", pa.bool_()),  # the step's update was skipped (non-finite loss or gradient)
    ("time_s", pa.float64()),
])
# Further float columns of train.parquet (optional, written by the trainer since early warning):
# zero_var_group_share: the share of the role's GRPO groups (prompt x role instance) whose rewards all
# agree, so that their advantages are zero (advantage collapse).

# One row per (step, eval split); workflow diagnostics are further float columns.
EVAL_SCHEMA = pa.schema([
    ("step", pa.int64()),
    ("split", pa.string()),
    ("accuracy", pa.float64()),
    ("n", pa.int64()),
    ("final_answer_parse_rate", pa.float64()),
    ("time_s", pa.float64()),
])

# One row per early warning: a detector of trainer/rl/early_warning.py crossing its threshold (onset) on a
# role's signal at a step; `version` is the detectors' definition version (EARLY_WARNING_VERSION).
WARNINGS_SCHEMA = pa.schema([
    ("step", pa.int64()),
    ("role", pa.string()),
    ("detector", pa.string()),
    ("value", pa.float64()),
    ("threshold", pa.float64()),
    ("version", pa.int64()),
])

# The detectors a warnings.parquet may name (trainer/rl/early_warning.py defines them; the analysis judges them).
EARLY_WARNING_DETECTORS = ("entropy_collapse", "advantage_collapse", "grad_norm_spike", "capture", "amplification",
                           "train_inference_mismatch")

# A bounded sample of whole episodes per eval: one row per turn.
SAMPLES_SCHEMA = pa.schema([
    ("step", pa.int64()),
    ("split", pa.string()),
    ("episode", pa.int64()),
    ("problem_id", pa.string()),
    ("turn", pa.int64()),
    ("role", pa.string()),
    ("agent", pa.int64()),
    ("prompt", pa.string()),
    ("completion", pa.string()),
    ("reward", pa.float64()),
    ("final_answer", pa.string()),
    ("correct", pa.bool_()),
])

TIME_COLUMNS = ("time_s",)  # the only columns that may differ between two runs with the same seed


def to_table(rows: list[dict[str, Any]] | pd.DataFrame, schema: pa.Schema) -> pa.Table:
    """A table with the schema's columns first (typed, required) and any extra float columns after."""
    df = pd.DataFrame(rows)
    missing = [n for n in schema.names if n not in df.columns]
    if missing and len(df):
        raise ValueError(f"rows lack required columns {missing}")
    if not len(df):
        return schema.empty_table()
    extra = [c for c in df.columns if c not in schema.names]
    fields = list(schema) + [pa.field(c, pa.float64()) for c in sorted(extra)]
    return pa.Table.from_pandas(df[[f.name for f in fields]], schema=pa.schema(fields), preserve_index=False)


def write_parquet_atomic(table: pa.Table, path: str | Path) -> None:
    """Write to a temporary name in the same directory, then rename: readers never see half a file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def write_json_atomic(obj: Any, path: str | Path) -> None:
    """Write JSON to a temporary name, fsync, rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# The run id is part of this contract; analysis reads it from here.
from trainer.sweep.runid import RunId, parse_run_id  # noqa: E402,F401


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this host (e.g. the writer of a `.NAME.tmp-PID` file)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
