"""Shared fixtures: a workflow copy, the SLURM profile and cluster, the session's tiny base model and the
math task (their imports inside them: a run of one light module imports neither torch nor snakemake).
The helpers they use live in named modules: tests/workflow.py (the workflow and snakemake CLI),
tests/models.py (tiny base models), tests/runs.py (tiny run configs), tests/slurm.py (the cluster),
tests/float_order.py (TEST_FLOAT_ORDER), tests/resilience.py (kill and resume checks)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.workflow import ROOT, copy_workflow


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A copy of the workflow (Snakefile, rules, config, profiles) in a temporary directory."""
    return copy_workflow(tmp_path)


@pytest.fixture
def slurm_profile_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`--profile slurm` as a user has it after `python -m trainer install-profile` (in a private config dir)."""
    import snakemake.common

    from trainer.sweep.profiles import install_profile

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(snakemake.common, "APPDIRS", None)
    install_profile(ROOT, "slurm")
    assert (tmp_path / "xdg" / "snakemake" / "slurm" / "profile.yaml").exists()
    return tmp_path


@pytest.fixture
def need_slurm() -> None:
    """Skip where no SLURM cluster answers (fail where REQUIRE_SLURM is set): tests/slurm.py."""
    from tests.slurm import require_slurm

    require_slurm()


@pytest.fixture(scope="module")
def base_model_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """model.json of the session's default tiny base model (tests/models.py: built once, whatever the worker)."""
    from tests.models import tiny_base_model

    return tiny_base_model(tmp_path_factory)


@pytest.fixture(scope="module")
def base_model(base_model_json: Path) -> dict[str, Any]:
    """The session's default tiny base model's model.json, read (a module overrides it for another model)."""
    return json.loads(base_model_json.read_text())


@pytest.fixture(scope="module")
def math_task() -> Iterator[Any]:
    """The math task with one verifier worker, closed after the module."""
    from trainer.tasks import get_task

    task = get_task("math", workers=1)
    yield task
    task.close()
