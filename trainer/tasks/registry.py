"""The tasks by name, and the two entry points: `get_task` and `load_problems`.

A lazy table (module, class) rather than imports: the task modules import `trainer.tasks.base`,
so base may not import them, and importing `trainer.tasks` stays cheap (the code task starts
sandbox helpers, the math task loads math_verify) until a task is asked for.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from trainer.tasks.base import Problem, Task

TASKS: dict[str, tuple[str, str]] = {
    "math": ("trainer.tasks.math_task", "MathTask"),
    "code": ("trainer.tasks.code_task", "CodeTask"),
}


def get_task(name: str, workers: int | None = None, allow_unisolated_sandbox: bool = False) -> Task:
    """The task called `name` ("math" or "code") with a scoring pool of `workers`; the code task
    runs programs unisolated where no sandbox isolation works only with `allow_unisolated_sandbox`."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r} (known: {', '.join(TASKS)})")
    module, cls = TASKS[name]
    options = {"allow_unisolated_sandbox": allow_unisolated_sandbox} if name == "code" else {}
    return getattr(import_module(module), cls)(workers=workers, **options)


def load_problems(task: str, spec: dict[str, Any], split: str) -> list[Problem]:
    """The problems of one data source of config.yaml (`tasks.<task>.train` or an `eval` entry).

    For an eval entry with `from_train_holdout: true`, the spec must carry the task's train
    source under `train_spec`; the result is that source's holdout (see sources.load_holdout).
    """
    from trainer.tasks.sources import load_source  # here, not at the top: it loads math_task

    return load_source(task, spec, split)
