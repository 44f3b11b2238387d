"""Settings of one run as a whole: its config.json (written by `trainer launch`), typed, and each workflow's
knobs (config.yaml's `workflows`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from trainer.contract.peak import SMOOTHING_WINDOW
from trainer.settings.fields import SettingsError, from_dict, setting
from trainer.settings.job import LauncherSettings, ResourceSettings, TrackingSettings
from trainer.settings.model import ModelSettings
from trainer.settings.sources import TaskSettings, task_settings
from trainer.settings.training import TrainingSettings

POLICY_MODES = ("shared", "isolated")


@dataclass(frozen=True)
class WorkflowSettings:
    """A workflow's knobs (each workflow reads its own)."""

    max_iterations: int = setting(3, "eval_opt: generate/evaluate rounds at most.", ge=1)
    n_votes: int = setting(3, "voting: parallel voters.", ge=2)
    max_subtasks: int = setting(3, "orch_workers: subtasks at most.", ge=1)
    share_main_task_with_workers: bool = setting(False, "orch_workers: workers also see the whole problem.")
    module: str | None = setting(
        None,
        "The module that registers this workflow (a class decorated with trainer.workflows.register), for a "
        "workflow defined outside trainer/workflows/; imported wherever the workflow is looked up. Absent for "
        "the built-in ones.",
        schema={"pattern": r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"},
    )


@dataclass(frozen=True)
class RunSettings:
    """Everything one run reads: its config.json (written by `trainer launch`), typed.

    `raw` keeps the dict it was read from: config.json is rewritten from it into each checkpoint
    (the same bytes, the same `config_hash`), and defaults are never written back into it.
    """

    run: str = setting("", "The run id, e.g. voting-math-tiny-shared-s0.")
    workflow: str = setting("single", "The workflow (registered in trainer.workflows.registry).")
    task: str = setting("math", "The task: math or code.")
    scale: str = setting("tiny", "The scale (a key of config.yaml's scales).")
    policy: str = setting(
        "shared", "shared: all roles update one policy; isolated: one per role.", choices=POLICY_MODES
    )
    seed: int = setting(0, "The run's seed (data order, sampling, initialisation).")
    variant: str | None = setting(
        None, "The run's variant (a named config delta of its matrix), absent for a plain run."
    )
    model: ModelSettings = setting(ModelSettings(), "The base model of the scale.")
    workflow_params: WorkflowSettings = setting(WorkflowSettings(), "The workflow's knobs.")
    task_params: TaskSettings = setting(TaskSettings(), "The task's data sources and limits.")
    training: TrainingSettings = setting(TrainingSettings(), "GRPO hyperparameters.")
    resources: ResourceSettings = setting(ResourceSettings(), "What the job asks of the cluster.")
    launcher: LauncherSettings = setting(LauncherSettings(), "How the job runs.")
    tracking: TrackingSettings = setting(TrackingSettings(), "The optional experiment tracker (unhashed).")
    base_model: dict[str, Any] | None = setting(None, "model.json of the base model build (path, facts).")
    config_hash: str | None = setting(None, "Content hash of the hashed view (trainer.contract.config.config_hash).")
    peak_smoothing_window: int = setting(
        SMOOTHING_WINDOW,
        "Evals in the smoothing of the peak the trainer keeps: "
        "config.yaml's analysis.smoothing_window, recorded where not the default "
        "(unhashed).",
    )
    roles: list[str] = setting([], "The workflow's roles, as launch records them for the analysis (unhashed).")
    parallel_role: dict[str, Any] | None = setting(
        None, "The role with parallel agents on one prompt and their number ({role, agents}), or None (unhashed)."
    )
    raw: dict[str, Any] = field(
        default_factory=dict,
        repr=False,
        compare=False,
        metadata={"help": "The dict these settings were read from (config.json)."},
    )

    def __post_init__(self) -> None:
        if self.model.name == "tiny" and not self.model.tiny:
            raise SettingsError(
                f"run {self.run}: model `tiny` needs its architecture: set scales.{self.scale}.tiny "
                f"(see config.yaml's tiny scale)"
            )
        if self.training.max_completion_length is None:
            raise SettingsError(
                f"run {self.run}: training.max_completion_length is unset; resolve the run config "
                f"first (trainer.sweep.config.resolve_run_config sets the task's)"
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSettings:
        """Settings of a resolved run config (config.json, or resolve_run_config's output)."""
        if "raw" in data:
            raise SettingsError("raw: unknown key")
        fields = {k: v for k, v in data.items() if k != "task_params"}
        settings = from_dict(cls, fields, "<run>")
        task = task_settings(data["task_params"], f"tasks.{settings.task}") if "task_params" in data else TaskSettings()
        return dataclasses.replace(settings, task_params=task, raw=data)
