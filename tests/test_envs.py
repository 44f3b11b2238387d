"""The environments name what the rules' CLIs import: each conda env file (envs/, named by the rules'
`conda:`) and pyproject.toml's dependencies (the environment without conda).

What a CLI imports: every import statement (and `find_spec` lookup) of the modules that
`python -m <package>` can reach, read from the source; for the analysis also what it imported when it
ran (`snakemake figures` under PYTHONPROFILEIMPORTTIME), which adds the libraries that pandas imports
only when a table is written (tabulate, jinja2). Import names map to distributions with
importlib.metadata.packages_distributions; an env provides its listed distributions and what they
require (without extras), as installed here."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
import sysconfig
import tomllib
from functools import cache
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.workflow import ROOT, snakemake

LOCAL_PACKAGES = ("trainer", "analysis")
# imported only to say that it is missing: the vLLM rollout backend is refused while it is not built
OPTIONAL_IMPORTS = {"vllm"}
# imported only when a config asks for it (tracking.backend: mlflow, wandb): pyproject's extra that installs it
EXTRA_IMPORTS = {"mlflow": "tracking", "wandb": "tracking"}
# seen at run time, but tried by a library that goes on without them (or by the interpreter's start)
RUNTIME_OPTIONAL = {
    "cloudpickle": "pyarrow tries it at import for pickling support",
    "pytz": "pandas (3.x) tries it for time zones; optional since pandas 3.0",
    "_distutils_hack": "setuptools' site .pth hook, imported as the interpreter starts",
    "wcwidth": "tabulate tries it for wide characters (installed here by mlflow's prettytable)",
}
# CLI subcommands that no rule runs: `python -m trainer install-profile` (.ci/setup, beside Snakemake)
NOT_RUN_BY_RULES = frozenset({"trainer.sweep.profiles"})
CONDA_TO_PYPI = {"pytorch": "torch"}  # conda-forge names that differ from the distribution's
NOT_DISTRIBUTIONS = {"python", "pip"}

RULES_SCRIPT = """
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, Quietness, ResourceSettings
root = Path(sys.argv[1])
with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
    wf = api.workflow(snakefile=root / "Snakefile", workdir=root, resource_settings=ResourceSettings(),
                      config_settings=ConfigSettings())
    print(json.dumps({r.name: [r.conda_env, str(Path(r.snakefile).parent), r.shellcmd] for r in wf._workflow.rules}))
"""


@cache
def rule_envs() -> dict[str, dict]:
    """env file -> {"rules": the rules naming it, "clis": the packages they run with `python -m`}."""
    proc = subprocess.run(
        [sys.executable, "-c", RULES_SCRIPT, str(ROOT)], capture_output=True, text=True, timeout=120, check=True
    )
    envs: dict[str, dict] = {}
    for rule, (conda_env, rule_dir, shellcmd) in json.loads(proc.stdout.splitlines()[-1]).items():
        clis = set(re.findall(r"python -m (\w+)", shellcmd or ""))
        assert conda_env or not clis, f"rule {rule} runs {clis} but names no conda env"
        if conda_env:
            entry = envs.setdefault(str((Path(rule_dir) / conda_env).resolve()), {"rules": set(), "clis": set()})
            entry["rules"].add(rule)
            entry["clis"] |= clis
    return envs


def module_path(module: str) -> Path | None:
    """The source file of a module of this repository, or None (a function or class imported by name)."""
    base = ROOT.joinpath(*module.split("."))
    return next((p for p in (base / "__init__.py", base.with_suffix(".py")) if p.exists()), None)


def imported_names(path: Path, module: str) -> set[str]:
    """The modules a source file imports (anywhere in it), `find_spec("x")` lookups included."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]) if node.level else ""
            base = ".".join(p for p in (base, node.module or "") if p)
            names |= {base} | {f"{base}.{alias.name}" for alias in node.names}
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", None) == "find_spec"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.add(node.args[0].value)
    return names


@cache
def static_imports(cli: str, skip: frozenset[str] = frozenset()) -> dict[str, str]:
    """Top-level third-party import name -> a module importing it, over every module of `cli` and the
    modules of this repository they import (with their parent packages), but those in `skip`."""
    todo = [".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / cli).rglob("*.py")]
    seen: set[str] = set()
    found: dict[str, str] = {}
    while todo:
        module = todo.pop().removesuffix(".__init__")
        path = module_path(module)
        if module in seen or module in skip or path is None:
            continue
        seen.add(module)
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        for name in imported_names(path, module):
            top = name.split(".")[0]
            if top in LOCAL_PACKAGES:
                todo.append(name)
            elif top not in sys.stdlib_module_names and top != "__future__":
                found.setdefault(top, module)
    return found


def distributions_of(imports: dict[str, str]) -> dict[str, str]:
    """Distribution (canonical name) -> how it is imported, for third-party import names."""
    by_name = metadata.packages_distributions()
    unknown = sorted(set(imports) - set(by_name) - OPTIONAL_IMPORTS)
    assert not unknown, f"imported but no installed distribution provides them: {unknown}"
    return {
        canonicalize_name(dist): f"`{name}` ({where})"
        for name, where in imports.items()
        if name in by_name
        for dist in by_name[name]
    }


def with_requirements(names: set[str]) -> set[str]:
    """Distributions and, transitively, what they require without extras (as installed here)."""
    provided, todo = set(), list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in provided:
            continue
        provided.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [r.name for r in map(Requirement, requires) if not r.marker or r.marker.evaluate({"extra": ""})]
    return provided


def env_file_distributions(path: Path) -> set[str]:
    """The distributions a conda env file lists, conda and pip entries."""
    listed: set[str] = set()
    for dep in yaml.safe_load(path.read_text())["dependencies"]:
        specs = dep["pip"] if isinstance(dep, dict) else [dep]
        for spec in specs:
            name = re.split(r"[=<>!~ \[]", spec, maxsplit=1)[0].lower()
            listed.add(CONDA_TO_PYPI.get(name, name))
    return {canonicalize_name(n) for n in listed - NOT_DISTRIBUTIONS}


def missing(needed: dict[str, str], listed: set[str]) -> list[str]:
    provided = with_requirements(listed)
    return [f"{dist} (imported as {how})" for dist, how in sorted(needed.items()) if dist not in provided]


def test_rules_name_the_env_of_each_cli():
    envs = {Path(f).name: (e["rules"], e["clis"]) for f, e in rule_envs().items()}
    trainer_rules = {"base_model", "prefetch_model", "prefetch_dataset", "train", "status", "plan", "plan_vs_actual"}
    assert envs["trainer.yaml"] == (trainer_rules, {"trainer"})
    assert envs["analysis.yaml"] == ({"analyse", "plot_figures", "figures", "calibrate_warnings"}, {"analysis"})


@pytest.mark.parametrize("env_name", ["trainer.yaml", "analysis.yaml"])
def test_env_file_lists_what_its_rules_import(env_name):
    path = str(ROOT / "envs" / env_name)
    needed = {
        d: h
        for cli in rule_envs()[path]["clis"]
        for d, h in distributions_of(static_imports(cli, NOT_RUN_BY_RULES)).items()
    }
    assert {"pandas", "pyarrow"} <= set(needed)  # the walk finds imports at all
    gaps = missing(needed, env_file_distributions(Path(path)))
    assert not gaps, f"envs/{env_name} (rules {sorted(rule_envs()[path]['rules'])}) misses {gaps}"


def pyproject_distributions(extra: str | None = None) -> set[str]:
    """The distributions pyproject.toml's dependencies (or one optional extra of them) name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = project["optional-dependencies"][extra] if extra else project["dependencies"]
    return {canonicalize_name(Requirement(d).name) for d in deps}


def test_pyproject_lists_what_the_clis_import():
    """Each import is a dependency, or (one only a config choice reaches) in the extra that choice needs."""
    imports = {name: where for cli in LOCAL_PACKAGES for name, where in static_imports(cli).items()}
    assert set(EXTRA_IMPORTS) <= set(imports), "the walk finds the trackers' imports"
    base = {name: where for name, where in imports.items() if name not in EXTRA_IMPORTS}
    gaps = missing(distributions_of(base), pyproject_distributions())
    for name, extra in EXTRA_IMPORTS.items():
        gaps += missing(distributions_of({name: imports[name]}), pyproject_distributions(extra))
    assert not gaps, f"pyproject.toml's dependencies miss {gaps}"


def installed_third_party(name: str) -> bool:
    """Whether a top-level module is importable here and comes from neither the standard library nor this repo."""
    if name in sys.stdlib_module_names or name in LOCAL_PACKAGES or name.startswith(("__editable__", "__future__")):
        return False
    spec = importlib.util.find_spec(name)
    return spec is not None and not (spec.origin or "").startswith(sysconfig.get_paths()["stdlib"] + "/")


def runtime_imports(log: Path) -> dict[str, str]:
    """Top-level third-party modules a process imported, from its PYTHONPROFILEIMPORTTIME lines (which
    also list the optional imports it tried and went without: those are not installed here)."""
    names = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)", log.read_text(), flags=re.MULTILINE)
    tops = {n.split(".")[0] for n in names}
    return {
        t: f"at run time, {log.name}" for t in sorted(tops) if installed_third_party(t) and t not in RUNTIME_OPTIONAL
    }


def test_analysis_env_lists_what_the_analysis_imports_when_it_runs(workdir, monkeypatch):
    """`snakemake figures` over one finished run: the analysis and figure commands' imports, as they ran."""
    from tests.synthetic_logs import write_synthetic_run

    write_synthetic_run(workdir / "results" / "runs" / "voting-math-tiny-shared-s0", "voting-math-tiny-shared-s0")
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")
    snakemake("figures", "--cores", "1", cwd=workdir)
    imports = {}
    for log in ("analyse.log", "plot_figures.log"):
        imports |= runtime_imports(workdir / "results" / "logs" / log)
    needed = distributions_of(imports)
    assert {"pandas", "matplotlib", "tabulate"} <= set(needed)
    for listed, where in [
        (env_file_distributions(ROOT / "envs" / "analysis.yaml"), "envs/analysis.yaml"),
        (pyproject_distributions(), "pyproject.toml's dependencies"),
    ]:
        gaps = missing(needed, listed)
        assert not gaps, f"{where} misses {gaps}"
