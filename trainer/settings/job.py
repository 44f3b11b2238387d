"""Settings of where and how a run's job runs (config.yaml's `resources`, `launcher` and `tracking`); none of
them is hashed: changing them reruns nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainer.settings.fields import setting

TRACKING_BACKENDS = ("none", "mlflow", "tensorboard", "wandb")


@dataclass(frozen=True)
class ResourceSettings:
    """What one training job asks of the cluster."""

    gpus: int = setting(0, "GPUs per job: one data-parallel process per GPU (NCCL).", ge=0)
    processes: int = setting(
        1, "Data-parallel processes of a CPU run (gpus 0; gloo); with GPUs it may only be 1 or equal gpus.", ge=1
    )
    cpus: int = setting(1, "CPU cores per job (also the torch threads of a CPU run).", ge=1)
    mem_gb: float = setting(4, "Memory per job in GiB.", gt=0)
    time_min: int = setting(60, "Wall-time limit per job in minutes.", ge=1)
    collective_timeout_min: float = setting(
        60,
        "Minutes a data-parallel process waits at a collective (a gather, a sum, a barrier) for its peers before "
        "the job fails (the process group's timeout): keep it above the longest stretch one rank works alone: "
        "one step's rollouts, one eval chunk (training.eval_chunk_problems), rank 0's checkpoint write.",
        gt=0,
    )


@dataclass(frozen=True)
class LauncherSettings:
    """How train jobs run (submitit)."""

    backend: str = setting(
        "local", "slurm: a cluster job; local: a subprocess; debug: in-process.", choices=("local", "debug", "slurm")
    )
    partition: str | None = setting(None, "SLURM partition.")
    account: str | None = setting(None, "SLURM account.")
    qos: str | None = setting(None, "SLURM QOS.")
    sbatch_extra: dict[str, Any] = setting({}, "Further sbatch options (submitit slurm_additional_parameters).")
    max_num_timeout: int = setting(3, "Requeues on timeout or preemption before a run fails.", ge=0)
    signal_delay_s: int = setting(
        120,
        "Seconds before the time limit at which SLURM signals the job (submitit slurm_signal_delay_s); the job "
        "then finishes its step, checkpoints within half of this, and requeues.",
        ge=1,
    )
    poll_interval_s: float = setting(0.5, "Seconds between looks at the job (slurm profile: 30).", gt=0)
    array_window_s: float | None = setting(
        None,
        "slurm backend: a launcher that submits waits this many seconds for the sweep's other submissions and "
        "they go as job arrays (one sbatch call per array of equal resources, at most MaxArraySize tasks; "
        "trainer/sweep/array_submit.py); null: one job per run.",
        ge=0,
    )
    allow_unisolated_sandbox: bool = setting(
        False,
        "A RISK, off by default: where no sandbox isolation works on a node (root, bubblewrap, unprivileged user "
        "namespaces), run the code task's model-written programs unisolated, as the job's user (they can read "
        "and write its files, signal its processes, reach the network); off: the run refuses to score.",
    )


@dataclass(frozen=True)
class TrackingSettings:
    """Optional experiment tracker (trainer/rl/tracking.py, docs/tracking.md): one tracker run per run id,
    resumed after a restart; train/<role>/<metric>, eval/<split>/<metric> and warnings/<role>/<detector>
    mirrored from the parquet logs."""

    backend: str = setting("none", "The tracker (none: the parquet logs only).", choices=TRACKING_BACKENDS)
    project: str = setting("marl-sweep", "MLflow experiment / TensorBoard subdirectory / wandb project.")
    tags: list[str] = setting([], "MLflow and wandb run tags.")
    dir: str | None = setting(None, "Directory of the local stores and wandb's offline files (null: results/tracking).")
    mlflow_tracking_uri: str | None = setting(
        None, "MLflow server URI (null: MLFLOW_TRACKING_URI, else a file store under dir).", schema={"minLength": 1}
    )
