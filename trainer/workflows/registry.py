"""The workflows by name: registration, lookup (importing a plugin module named in config), and the
roles of a workflow that config.json records.

A workflow defined outside this package is a class decorated with `@register` in any importable
module, named in config: `workflows: {my_workflow: {module: my_package.my_workflow}}`. Every
process that looks the workflow up (Snakemake while it parses, the launcher, the trainer, the
base-model build) finds the module in the run's `workflow_params` and imports it.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
from typing import Any, TypeVar

from trainer.contract.rundir import roles_entry
from trainer.contract.runid import WORKFLOW_NAME
from trainer.tasks import Task
from trainer.workflows.base import Workflow

WORKFLOWS: dict[str, type[Workflow]] = {}
PLUGIN_KEY = "module"  # workflows.<name>.module in config: the module that registers <name>

W = TypeVar("W", bound=type[Workflow])


def _origin(cls: type) -> tuple[str, str]:
    """Where a class is defined: one file imported under two module names defines it twice."""
    return cls.__qualname__, os.path.realpath(inspect.getfile(cls))


def register(cls: W) -> W:
    """Class decorator: make `cls` known by `cls.name`, after checking its name and roles."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not re.fullmatch(WORKFLOW_NAME, name):
        raise ValueError(
            f"workflow class {cls.__qualname__}: name {name!r} must match {WORKFLOW_NAME} "
            f"(lowercase, digits, underscores: run ids split on dashes)"
        )
    roles = getattr(cls, "roles", ())
    if not roles or len(set(roles)) != len(roles) or not all(isinstance(r, str) and r for r in roles):
        raise ValueError(f"workflow {name!r}: roles must be distinct non-empty names, got {roles!r}")
    stray = [r for r in (*cls.answer_roles, *filter(None, [cls.parallel_role])) if r not in roles]
    if stray:
        raise ValueError(f"workflow {name!r}: answer_roles/parallel_role name {stray}, not among its roles {roles}")
    known = WORKFLOWS.get(name)
    if known is not None and _origin(known) != _origin(cls):
        raise ValueError(
            f"workflow {name!r} is registered twice: by {known.__module__}.{known.__qualname__} "
            f"and by {cls.__module__}.{cls.__qualname__}"
        )
    WORKFLOWS[name] = cls
    return cls


def _import_plugin(name: str, module: str) -> None:
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise ValueError(f"workflows.{name}.{PLUGIN_KEY}: cannot import {module!r} ({type(e).__name__}: {e})") from e
    if name not in WORKFLOWS:
        raise ValueError(
            f"workflows.{name}.{PLUGIN_KEY}: module {module!r} registers no workflow {name!r} "
            f"(known now: {sorted(WORKFLOWS)}); decorate its class with @register"
        )


def workflow_class(name: str, params: dict[str, Any] | None = None) -> type[Workflow]:
    """The class of workflow `name`, importing `params["module"]` first when it names one."""
    module = (params or {}).get(PLUGIN_KEY)
    if name not in WORKFLOWS and module:
        _import_plugin(name, module)
    if name not in WORKFLOWS:
        raise ValueError(
            f"unknown workflow {name!r}: known are {sorted(WORKFLOWS)}; one defined outside "
            f"trainer/workflows/ needs `workflows.{name}.{PLUGIN_KEY}: <the module that registers it>`"
        )
    return WORKFLOWS[name]


def make_workflow(name: str, params: dict[str, Any], task: Task, prompts: dict[str, str] | None = None) -> Workflow:
    """The workflow called `name` with `params`, its prompts updated by `prompts`."""
    return workflow_class(name, params)(params, task, prompts)


def role_facts(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """What config.json records of a run's workflow for the analysis: its roles, and the role whose
    agents answer one prompt in parallel with their (nominal) number, or None."""
    cls = workflow_class(name, params)
    return roles_entry(cls.roles, cls.parallel_role, cls.parallel_agents(params))
