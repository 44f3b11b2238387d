"""The run directory and its parquet schemas: the contract between trainer and analysis.

Analysis imports this module and nothing else from the trainer.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

# pandas and pyarrow are imported on first use of a schema or a parquet helper (PEP 562
# __getattr__ below), so that the launcher, which waits on the login node for each run in
# flight, reads and writes the run's JSON files without holding them in memory (~90 MB each).

CONFIG_JSON = "config.json"
TRAIN_PARQUET = "train.parquet"
EVAL_PARQUET = "eval.parquet"
SAMPLES_PARQUET = "samples.parquet"
DONE_JSON = "done.json"
WARNINGS_PARQUET = "warnings.parquet"  # early-warning events (trainer/early_warning.py)
WORK_DIR = "work"
# Under work/ (not read by analysis): the trainer's progress and last failure, for `trainer status`,
# and the lock a training process holds.
PROGRESS_JSON = "progress.json"
FAILURE_JSON = "failure.json"
TRAIN_LOCK = "train.lock"
# an eval's finished chunks of problems, so that a requeued job resumes it (trainer/rl/evaluation.py):
# eval_progress/step-NNNNNN/SPLIT_INDEX-CHUNK.pkl, removed once the eval is done
EVAL_PROGRESS_DIR = "eval_progress"
# The checkpoint layout, under work/: checkpoints/step-NNNNNN/{state.pt, policies/, config.json, the logs so
# far}; written as checkpoints/.step-NNNNNN.tmp and renamed, deleted by renaming to .step-NNNNNN.deleting.
CHECKPOINTS_DIR = "checkpoints"
STATE_PT = "state.pt"
# written last into each checkpoint: every other file's size and SHA-256 (trainer/rl/checkpoint_files.py); a
# checkpoint that fails it is renamed step-NNNNNN.damaged-REASON, which `checkpoints` no longer lists
MANIFEST_JSON = "manifest.json"
POLICIES_DIR = "policies"
# The peak model kept (trainer/rl/peak_keeper.py): work/peak/step-NNNNNN/{policies/, peak.json}, hard-linked
# into each checkpoint (step-NNNNNN/peak/) and, at publish, into the run directory (peak/, via .peak.publishing);
# done.json's `peak` names its step, accuracy, smoothed accuracy and policies path relative to the run directory.
PEAK_DIR = "peak"
PEAK_JSON = "peak.json"
PEAK_PUBLISHING = ".peak.publishing"


def checkpoint_dir(work: Path, step: int) -> Path:
    """work/checkpoints/step-NNNNNN: the whole checkpoint after `step`."""
    return work / CHECKPOINTS_DIR / f"step-{step:06d}"


def checkpoint_tmp_dir(work: Path, step: int) -> Path:
    """The name a checkpoint is written under before its rename (a kill leaves only this behind)."""
    return work / CHECKPOINTS_DIR / f".step-{step:06d}.tmp"


def checkpoints(work: Path) -> list[Path]:
    """The whole checkpoints under work/ (`step-NNNNNN`, not one moved aside as damaged), oldest first."""
    return sorted(p for p in (work / CHECKPOINTS_DIR).glob("step-*") if p.name[len("step-") :].isdigit())


def incomplete_checkpoints(work: Path) -> list[Path]:
    """Checkpoints a killed write or delete left half-done (`.step-*`)."""
    return sorted((work / CHECKPOINTS_DIR).glob(".step-*"))


def run_is_done(done: dict[str, Any] | None, config: dict[str, Any] | None) -> bool:
    """Whether done.json says the run finished under config.json's config (same hash): every step, or
    ended early by an early warning (training.on_warning: stop; done.json's `stopped_early`)."""
    return bool(
        done
        and config
        and done.get("config_hash") == config["config_hash"]
        and (done.get("steps_done") == config["training"]["max_steps"] or done.get("stopped_early"))
    )


def _schemas() -> dict[str, pa.Schema]:
    """The parquet schemas (built on first use: see the note on imports)."""
    return {
        "TRAIN_SCHEMA": _train_schema(),
        "EVAL_SCHEMA": _eval_schema(),
        "SAMPLES_SCHEMA": _samples_schema(),
        "WARNINGS_SCHEMA": _warnings_schema(),
    }


def _train_schema() -> pa.Schema:
    """train.parquet's required columns."""
    import pyarrow as pa

    # One row per (step, role). grad_* are this role's contribution to its policy's gradient, pre-clip.
    schema = pa.schema(
        [
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
            ("logp_mismatch", pa.float64()),  # mean |log p_engine - log p_trainer| over sampled tokens (vllm; else NaN)
            ("time_s", pa.float64()),
        ]
    )
    # Further float columns of train.parquet (optional, written by the trainer since early warning):
    # zero_var_group_share: the share of the role's GRPO groups (prompt x role instance) whose rewards all
    # agree, so that their advantages are zero (advantage collapse).
    # With training.agent_gradients, the per-agent gradient columns: see optional_types below.
    # With training.vllm_importance_sampling_correction (vllm backend): importance_sampling_ratio_mean, _min,
    # _max, the role's TRL importance ratio over its completion tokens (sequences in the sequence_* modes),
    # as TRL logs sampling/importance_sampling_ratio/{mean,min,max}.
    return schema


def _samples_schema() -> pa.Schema:
    """samples.parquet's columns."""
    import pyarrow as pa

    # A bounded sample of whole episodes per eval: one row per turn.
    return pa.schema(
        [
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
        ]
    )


def _eval_schema() -> pa.Schema:
    """eval.parquet's required columns."""
    import pyarrow as pa

    # One row per (step, eval split); workflow diagnostics are further float columns. Each of the n problems
    # is run k times (training.eval_samples, trainer/rl/evaluation.py): accuracy is the mean over all
    # n_episodes = n x k, accuracy_std the std (ddof 1) of the k per-sample accuracies (NaN at k = 1),
    # pass_at_k the share of problems with a correct sample (accuracy at k = 1).
    return pa.schema(
        [
            ("step", pa.int64()),
            ("split", pa.string()),
            ("accuracy", pa.float64()),
            ("n", pa.int64()),
            ("final_answer_parse_rate", pa.float64()),
            ("time_s", pa.float64()),
            ("k", pa.int64()),
            ("accuracy_std", pa.float64()),
            ("pass_at_k", pa.float64()),
            ("n_episodes", pa.int64()),
        ]
    )


def _warnings_schema() -> pa.Schema:
    """One row per early warning: a detector of trainer/early_warning.py crossing its threshold (onset)
    on a role's signal at a step; `version` is that detector's definition version (DETECTOR_VERSIONS)."""
    import pyarrow as pa

    return pa.schema(
        [
            ("step", pa.int64()),
            ("role", pa.string()),
            ("detector", pa.string()),
            ("value", pa.float64()),
            ("threshold", pa.float64()),
            ("version", pa.int64()),
        ]
    )


_SCHEMAS: dict[str, Any] = {}


def __getattr__(name: str) -> Any:
    """TRAIN_SCHEMA, EVAL_SCHEMA, SAMPLES_SCHEMA and WARNINGS_SCHEMA, built once on first access."""
    if name in ("TRAIN_SCHEMA", "EVAL_SCHEMA", "SAMPLES_SCHEMA", "WARNINGS_SCHEMA"):
        if not _SCHEMAS:
            _SCHEMAS.update(_schemas())
        return _SCHEMAS[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# The detectors a warnings.parquet may name (trainer/early_warning.py defines them; the analysis judges them).
EARLY_WARNING_DETECTORS = (
    "entropy_collapse",
    "advantage_collapse",
    "grad_norm_spike",
    "capture",
    "amplification",
    "train_inference_mismatch",
    "length_surge",
    "entropy_reward",
    "reward_drop",
    "clip_ratio",
    "kl",
    "combined",
)

TIME_COLUMNS = ("time_s",)  # the only columns that may differ between two runs with the same seed


def with_eval_samples(row: dict[str, Any]) -> dict[str, Any]:
    """An eval row written before eval_samples existed (one episode per problem), with its k = 1 columns;
    a row that has them is returned as it is (a checkpoint's partial logs, synthetic logs)."""
    if "k" in row:
        return row
    return {**row, "k": 1, "accuracy_std": float("nan"), "pass_at_k": row["accuracy"], "n_episodes": row["n"]}


def optional_types() -> dict[str, pa.DataType]:
    """The optional (extra) columns whose type is not float64: train.parquet's per-agent gradients.

    With training.agent_gradients (trainer/rl/agent_gradients.py), each (step, role) row has the role's
    parallel agents (voter k, worker k): n_agents (int), agent_grad_norms (one float per agent, in agent
    order), and the float columns amplification_index = sum_k ||g_k|| / ||sum_k g_k|| and agent_cos_mean
    (mean pairwise cosine), NaN where undefined (fewer than 2 agents, a zero sum).
    """
    import pyarrow as pa

    return {"n_agents": pa.int64(), "agent_grad_norms": pa.list_(pa.float64())}


def to_table(rows: list[dict[str, Any]] | pd.DataFrame, schema: pa.Schema) -> pa.Table:
    """A table with the schema's columns first (typed, required) and any extra columns after: floats, but
    for the optional columns of other types (optional_types)."""
    import pandas as pd
    import pyarrow as pa

    df = pd.DataFrame(rows)
    missing = [n for n in schema.names if n not in df.columns]
    if missing and len(df):
        raise ValueError(f"rows lack required columns {missing}")
    if not len(df):
        return schema.empty_table()
    extra = [c for c in df.columns if c not in schema.names]
    optional = optional_types()
    fields = list(schema) + [pa.field(c, optional.get(c, pa.float64())) for c in sorted(extra)]
    return pa.Table.from_pandas(df[[f.name for f in fields]], schema=pa.schema(fields), preserve_index=False)


def write_parquet_atomic(table: pa.Table, path: str | Path) -> None:
    """Write to a temporary name in the same directory, then rename: readers never see half a file."""
    import pyarrow.parquet as pq

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


def lock_held(path: str | Path) -> bool:
    """Whether another process holds the flock on `path` (a trainer's train lock, a launcher's run lock)."""
    path = Path(path)
    if not path.exists():
        return False
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


# The run id is part of this contract; analysis reads it from here.
# So is the smoothed peak (the trainer keeps its checkpoint, the analysis reports it): one definition.
from trainer.contract.peak import PEAK_VERSION, SMOOTHING_WINDOW, curve_peak, peak_index, smooth  # noqa: E402,F401
from trainer.contract.runid import RunId, parse_run_id  # noqa: E402,F401


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this host (e.g. the writer of a `.NAME.tmp-PID` file)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# config.json records its workflow's roles (the launcher writes them, from the workflow's class), so that
# analysis never repeats what a workflow is: `roles` (in the workflow's order) and `parallel_role`, the
# role whose agents answer one prompt in parallel with their nominal number ({"role", "agents"}) or null.
# Both are facts of the code, not settings: they are not in the config hash.
ROLES_KEY = "roles"
PARALLEL_ROLE_KEY = "parallel_role"
# config.json files of runs finished before it recorded the roles: the study's four workflows, for those alone
# (role names, and the parallel role with the workflow_params key that counts its agents)
LEGACY_ROLES: dict[str, tuple[tuple[str, ...], tuple[str, str] | None]] = {
    "single": (("generator",), None),
    "eval_opt": (("generator", "evaluator"), None),
    "voting": (("generator", "aggregator"), ("generator", "n_votes")),
    "orch_workers": (("orchestrator", "worker", "synthesizer"), ("worker", "max_subtasks")),
}


@dataclass(frozen=True)
class WorkflowRoles:
    """What analysis knows of a run's workflow: its roles and the parallel role's nominal agents."""

    roles: tuple[str, ...]
    parallel_role: str | None
    parallel_agents: float  # agents of parallel_role per prompt (nominal, at most); 1.0 without one


def roles_entry(roles: tuple[str, ...] | list[str], parallel_role: str | None, agents: int) -> dict[str, Any]:
    """The config.json keys that record a workflow's roles (what `workflow_roles` reads)."""
    parallel = None if parallel_role is None else {"role": parallel_role, "agents": agents}
    return {ROLES_KEY: list(roles), PARALLEL_ROLE_KEY: parallel}


def workflow_roles(config: dict[str, Any]) -> WorkflowRoles:
    """A run's workflow roles from its config.json; for a file that predates them, LEGACY_ROLES.

    Raises ValueError naming the run and workflow when neither has them.
    """
    if ROLES_KEY in config:
        parallel = config.get(PARALLEL_ROLE_KEY)
        return WorkflowRoles(
            tuple(config[ROLES_KEY]),
            parallel["role"] if parallel else None,
            float(parallel["agents"]) if parallel else 1.0,
        )
    if config.get("workflow") not in LEGACY_ROLES:
        raise ValueError(
            f"{config.get('run')}: config.json has no `{ROLES_KEY}` and its workflow "
            f"{config.get('workflow')!r} is not one whose roles are known without it; rerun it "
            f"(the launcher records the roles in config.json)"
        )
    roles, parallel = LEGACY_ROLES[config["workflow"]]
    if parallel is None:
        return WorkflowRoles(roles, None, 1.0)
    role, key = parallel
    return WorkflowRoles(roles, role, float(config.get("workflow_params", {}).get(key, float("nan"))))
