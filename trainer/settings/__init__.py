"""Typed settings of one run: the one home of every setting's default, type, help and constraints.

A run's config.json (written by `trainer launch`, layout unchanged so that its `config_hash`
stays the same) is read into `RunSettings.from_dict`; code reads typed fields, never
`.get(key, default)` on a dict. `training` carries TRL's `GRPOConfig` field names. A key
unknown to a dataclass, or a value outside a field's choices, is an error naming its key path.

One module per section: training (with lora and vllm), early_warning, sources (a task's data),
model (the base model, the tiny model), job (resources, launcher, tracking) and run (the whole run,
each workflow's knobs); fields.py is the machinery. rules/config.schema.yaml, which config.yaml is
validated against at startup, is generated from these classes (schema.py).

To add a setting: one field in its section's class, with its default, `help` and constraints; then
`python -m trainer.settings.schema` writes the schema; config.yaml states a value only where the study's
differs from the default.
"""

from trainer.settings.early_warning import EarlyWarningSettings
from trainer.settings.fields import SettingsError, default_of, from_dict, setting
from trainer.settings.job import TRACKING_BACKENDS, LauncherSettings, ResourceSettings, TrackingSettings
from trainer.settings.model import DTYPES, ModelSettings, TinySettings
from trainer.settings.run import POLICY_MODES, RunSettings, WorkflowSettings
from trainer.settings.sources import (
    COMMON_SOURCE_FIELDS,
    SOURCE_FIELDS,
    SourceSettings,
    TaskSettings,
    check_eval_problems,
    eval_problem_limit,
    task_settings,
)
from trainer.settings.training import (
    GENERATION_BACKENDS,
    IMPORTANCE_SAMPLING_MODES,
    LoraSettings,
    TrainingSettings,
    VllmSettings,
    check_importance_sampling,
    is_eval_step,
)

__all__ = [
    "COMMON_SOURCE_FIELDS",
    "DTYPES",
    "GENERATION_BACKENDS",
    "IMPORTANCE_SAMPLING_MODES",
    "POLICY_MODES",
    "SOURCE_FIELDS",
    "TRACKING_BACKENDS",
    "EarlyWarningSettings",
    "LauncherSettings",
    "LoraSettings",
    "ModelSettings",
    "ResourceSettings",
    "RunSettings",
    "SettingsError",
    "SourceSettings",
    "TaskSettings",
    "TinySettings",
    "TrackingSettings",
    "TrainingSettings",
    "VllmSettings",
    "WorkflowSettings",
    "check_eval_problems",
    "check_importance_sampling",
    "default_of",
    "eval_problem_limit",
    "from_dict",
    "is_eval_step",
    "setting",
    "task_settings",
]
