"""Reading one run directory: check that its logs are whole, read only the columns the analysis uses."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from trainer.contract import rundir

# what the analysis reads of each log; pyarrow skips the rest (samples' prompts are most of its bytes)
TRAIN_COLUMNS = ["step", "role", "policy", "n_turns", "grad_norm", "grad_sq_share", "completion_len_mean", "skipped"]
# per-agent gradient columns of roles with parallel agents: read where the trainer wrote them (analysis/agents.py)
TRAIN_OPTIONAL = ["n_agents", "amplification_index", "agent_cos_mean"]
EVAL_REQUIRED = ["step", "split", "accuracy", "n", "final_answer_parse_rate"]
SAMPLES_COLUMNS = ["step", "split", "episode", "role", "agent", "completion", "final_answer"]
SAMPLES_WORKFLOWS = {"voting"}  # the only workflow whose signatures need the texts


class RunLogError(ValueError):
    """A run directory whose logs are partial or disagree with its done.json."""


@dataclass
class RunLogs:
    """What the analysis reads of one finished run."""

    run: str
    config: dict[str, Any]
    evals: pd.DataFrame
    train: pd.DataFrame
    samples: pd.DataFrame
    roles: rundir.WorkflowRoles  # from config.json: what the analysis knows of the run's workflow


def _read(
    run_dir: Path, name: str, columns: list[str] | None, required: list[str], optional: tuple[str, ...] = ()
) -> pd.DataFrame:
    """A parquet file with `columns` (all when None) and those of `optional` it has, naming the run, file and
    required columns it lacks."""
    path = run_dir / name
    try:
        present = pq.read_schema(path).names
    except Exception as e:  # a truncated or foreign file: say which, keep the cause
        raise RunLogError(f"{run_dir.name}: cannot read {name}: {e}") from e
    lacking = [c for c in required if c not in present]
    if lacking:
        raise RunLogError(f"{run_dir.name}: {name} lacks column(s) {', '.join(lacking)}")
    if columns is not None:
        columns = columns + [c for c in optional if c in present]
    return pq.read_table(path, columns=columns).to_pandas()


def load_run(run_dir: str | Path) -> RunLogs:
    """The run's config and logs, after checking that done.json matches its parquet (RunLogError if not)."""
    run_dir = Path(run_dir)
    missing = [
        n
        for n in (rundir.CONFIG_JSON, rundir.DONE_JSON, rundir.EVAL_PARQUET, rundir.TRAIN_PARQUET)
        if not (run_dir / n).exists()
    ]
    if missing:
        raise RunLogError(f"{run_dir.name}: missing {', '.join(missing)}")
    try:
        cfg = json.loads((run_dir / rundir.CONFIG_JSON).read_text())
        done = json.loads((run_dir / rundir.DONE_JSON).read_text())
    except json.JSONDecodeError as e:
        raise RunLogError(f"{run_dir.name}: bad JSON: {e}") from e
    lacking = [k for k in ("run", "workflow", "task", "scale", "policy", "seed", "training") if k not in cfg]
    if lacking:
        raise RunLogError(f"{run_dir.name}: config.json lacks {', '.join(lacking)}")
    try:
        roles = rundir.workflow_roles(cfg)
    except ValueError as e:
        raise RunLogError(f"{run_dir.name}: {e}") from e
    evals = _read(run_dir, rundir.EVAL_PARQUET, None, EVAL_REQUIRED)
    train = _read(run_dir, rundir.TRAIN_PARQUET, TRAIN_COLUMNS, TRAIN_COLUMNS, tuple(TRAIN_OPTIONAL))
    problems = []
    if done.get("config_hash") != cfg.get("config_hash"):
        problems.append(f"done.json hash {done.get('config_hash')} != config.json hash {cfg.get('config_hash')}")
    if done.get("steps_done") != done.get("steps_expected") and not done.get("stopped_early"):  # early warning
        problems.append(f"done.json says {done.get('steps_done')} of {done.get('steps_expected')} steps")
    last = int(train["step"].max()) if len(train) else 0
    if last != done.get("steps_done"):
        problems.append(f"train.parquet ends at step {last} but done.json says {done.get('steps_done')}")
    if not len(evals):
        problems.append("eval.parquet has no rows")
    stray = sorted(set(train["role"]) - set(roles.roles))
    if stray:
        problems.append(f"train.parquet has roles {stray} that config.json's workflow does not ({list(roles.roles)})")
    if problems:
        raise RunLogError(f"{run_dir.name}: " + "; ".join(problems))
    samples = pd.DataFrame(columns=SAMPLES_COLUMNS)
    if cfg["workflow"] in SAMPLES_WORKFLOWS and (run_dir / rundir.SAMPLES_PARQUET).exists():
        samples = _read(run_dir, rundir.SAMPLES_PARQUET, SAMPLES_COLUMNS, SAMPLES_COLUMNS)
    return RunLogs(cfg["run"], cfg, evals, train, samples, roles)


def primary_split(evals: pd.DataFrame) -> str:
    """The split the figures and questions use: the first the trainer logged (config.yaml's first eval)."""
    return str(evals["split"].iloc[0])
