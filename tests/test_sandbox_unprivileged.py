"""The sandbox as a cluster runs it: as an unprivileged user, under each mechanism this machine has.

tests/sandbox_attacks.py plays a training job and scores the attacks (reads and writes outside,
the network, signals to the trainer and its processes, a fork bomb, a memory bomb) and correct
programs; it runs here as root (`root`) and as an unprivileged user (`userns`; bubblewrap where
installed, found by the probe), and every run must give the same results. Under root CI the
user is created here (useradd) and given traverse permission on the directories above the job's
interpreter for the tests' duration, as a cluster's users have on theirs.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import trainer.tasks.sandbox as sandbox_module
from trainer.tasks import sandbox_mechanisms
from trainer.tasks.base import Task, default_workers
from trainer.tasks.code_task import CodeTask
from trainer.tasks.sandbox import Limits, Sandbox, SandboxUnavailable

ROOT = os.geteuid() == 0
USER = "trainer-sandbox-test"
REPO = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).with_name("sandbox_attacks.py")
TESTS = "assert f(1) == 4\nassert f(2) == 5\n"
GOOD = "def f(x):\n    return x + 3\n"
# attack: [verdict (None: either), harmless]; a correct program scores 1 in every mechanism
EXPECTED = {
    "correct": [True, True],
    "read_outside": [True, True],
    "write_outside": [True, True],
    "network": [True, True],
    "signal_trainer": [True, True],
    "kill_everything": [None, True],
    "fork_bomb": [False, True],
    "memory_bomb": [False, True],
    "correct_stdio": [True, True],
}
JOB_INTERPRETER = f"{tuple(sys.version_info[:2])} 1 1"  # (major, minor), isolated, no site


def _traverse_paths() -> list[str]:
    """Every directory above the job's interpreter, its prefix, the venv and this checkout."""
    dirs = set()
    for path in (os.path.realpath(sys.executable), os.path.realpath(sys.base_prefix), sys.prefix, str(REPO)):
        p = Path(path)
        dirs.update(str(d) for d in [p, *p.parents] if d.is_dir())
    return sorted(dirs)


@pytest.fixture(scope="session")
def unprivileged():
    """(uid, gid) of an unprivileged user who can run the job's interpreter; None when this process is one."""
    if not ROOT:
        yield None
        return
    try:
        pwd.getpwnam(USER)
    except KeyError:
        r = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
            capture_output=True,
            text=True,
        )
        if r.returncode not in (0, 9):  # 9: created meanwhile by another run
            pytest.fail(f"useradd {USER}: {r.stderr.strip()}")
    entry = pwd.getpwnam(USER)
    granted = []
    for d in _traverse_paths():
        mode = os.stat(d).st_mode
        if not mode & stat.S_IXOTH:
            os.chmod(d, stat.S_IMODE(mode) | stat.S_IXOTH)  # traverse only: no listing, no reading
            granted.append((d, stat.S_IMODE(mode)))
    try:
        yield entry.pw_uid, entry.pw_gid
    finally:
        for d, mode in granted:
            os.chmod(d, mode)


def run_attacks(mechanism: str, user: tuple[int, int] | None) -> dict:
    """tests/sandbox_attacks.py's report, run as `user` (None: as this process)."""
    scratch = tempfile.mkdtemp(prefix="sandbox-attacks-")
    try:

        def drop() -> None:
            if user is not None:
                os.setgroups([])
                os.setgid(user[1])
                os.setuid(user[0])

        if user is not None:
            os.chown(scratch, *user)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(REPO),
            "TMPDIR": scratch,
            "HOME": scratch,
            "LANG": "C.UTF-8",
        }
        r = subprocess.run(
            [sys.executable, str(SCRIPT), mechanism, scratch],
            capture_output=True,
            text=True,
            env=env,
            cwd=scratch,
            preexec_fn=drop,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def check(report: dict) -> None:
    """Nothing escaped, correct programs scored 1, under the job's interpreter: the same as under root."""
    got = {name: [None if EXPECTED[name][0] is None else v, h] for name, (v, h) in report["results"].items()}
    assert got == EXPECTED, (report["mechanism"], report["details"])
    assert "MemoryError" in report["details"]["memory_bomb"]
    assert report["details"]["interpreter"] == JOB_INTERPRETER


@pytest.mark.skipif(not ROOT, reason="the root mechanism needs root")
def test_attacks_as_root():
    report = run_attacks("root", None)
    assert report["mechanism"] == "root"
    check(report)


def test_attacks_as_an_unprivileged_user_under_user_namespaces(unprivileged):
    report = run_attacks("userns", unprivileged)
    assert report["mechanism"] == "userns"
    check(report)


def test_attacks_as_an_unprivileged_user_under_the_probed_mechanism(unprivileged):
    """The probe picks bubblewrap where installed (CI installs it), else user namespaces."""
    report = run_attacks("probe", unprivileged)
    assert report["mechanism"] == ("bwrap" if sandbox_mechanisms.bwrap_path() else "userns")
    check(report)


@pytest.fixture
def fresh_probe():
    """A machine probed anew (the mechanism is cached per process), and forgotten afterwards."""
    sandbox_mechanisms.forget()
    yield
    sandbox_mechanisms.forget()


def test_probed_once_per_job_and_logged(fresh_probe, monkeypatch, caplog):
    probes = []
    real = Sandbox.probe
    monkeypatch.setattr(Sandbox, "probe", lambda self, m: probes.append(m) or real(self, m))
    with caplog.at_level(logging.INFO, logger="trainer.tasks.sandbox_mechanisms"):
        first, second = Sandbox(Limits()), Sandbox(Limits())
    assert first.mechanism == second.mechanism and len(probes) == 1
    assert [r.getMessage() for r in caplog.records].count(
        f"sandbox: isolation by {first.mechanism} ({sandbox_mechanisms.WHAT_HOLDS[first.mechanism]})"
    ) == 1


def test_refuses_without_a_mechanism_unless_the_job_opts_out(fresh_probe, monkeypatch, caplog):
    monkeypatch.setattr(Sandbox, "probe", lambda self, m: "made unavailable by the test")
    with pytest.raises(SandboxUnavailable) as err:
        Sandbox(Limits())
    message = str(err.value)
    for part in ("root: ", "bwrap: ", "userns: ", "launcher.allow_unisolated_sandbox: true", "a risk"):
        assert part in message, message
    with pytest.raises(SandboxUnavailable):
        CodeTask(limits=Limits())  # the task refuses before scoring anything, never scores 0 silently
    with caplog.at_level(logging.WARNING, logger="trainer.tasks.sandbox_mechanisms"):
        box = Sandbox(Limits(), allow_unisolated=True)
        assert box.mechanism == "unisolated"
        assert box.run_assert(GOOD, TESTS, entry_points=["f"]).passed
        assert Sandbox(Limits(), allow_unisolated=True).run_assert(GOOD, TESTS).passed
    risks = [r for r in caplog.records if sandbox_mechanisms.RISK in r.getMessage()]
    assert len(risks) == 1 and "made unavailable by the test" in risks[0].getMessage()


def test_programs_run_under_the_jobs_interpreter_not_the_nodes(monkeypatch, tmp_path):
    """A node whose /usr/bin/python3 is another Python (RHEL 8: 3.6): programs still run under the
    job's interpreter, so a solution using a newer feature scores the same on every node."""
    node_python = tmp_path / "python3"
    node_python.write_text("#!/bin/sh\necho 'Python 3.6.8 (the node)'\nexit 3\n")
    node_python.chmod(0o755)
    monkeypatch.setattr(sandbox_module, "SYSTEM_PYTHON", str(node_python), raising=False)
    box = Sandbox(Limits())
    assert box.python == os.path.realpath(sys.executable)
    ex = box.execute(["-c", "import sys; print(tuple(sys.version_info[:3]))"])
    assert ex.stdout.strip() == str(tuple(sys.version_info[:3])), ex
    newer = "def f(x):\n    if (y := x + 3) and 'ab'.removeprefix('a') == 'b':\n        return y\n"  # 3.8, 3.9
    assert box.run_assert(newer, TESTS, entry_points=["f"]).passed


def test_the_view_holds_the_interpreter_never_the_whole_machine(monkeypatch):
    job = os.path.realpath(sys.executable)
    paths = sandbox_mechanisms.view_paths(job)
    assert {"/usr", "/etc"} <= set(paths) and any(job.startswith(p + "/") for p in paths), paths
    monkeypatch.setattr(sys, "base_prefix", "/")
    monkeypatch.setattr(sys, "base_exec_prefix", "/")
    assert "/" not in sandbox_mechanisms.view_paths("/python3")
    assert "/opt/py" in sandbox_mechanisms.view_paths("/opt/py/python3")


def test_scoring_threads_follow_the_jobs_cpus(monkeypatch):
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "12")
    assert default_workers() == 12
    monkeypatch.delenv("SLURM_CPUS_PER_TASK")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert default_workers() == 16 and Task().workers == 16
