"""The code sandbox: adversarial programs score 0, harm nothing and leave no process behind."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import psutil
import pytest

from trainer.tasks.runners import RUNNERS, runner_source
from trainer.tasks.sandbox import UID_BASE, UID_COUNT, Limits, Sandbox, outputs_match

ROOT = os.geteuid() == 0
root_only = pytest.mark.skipif(not ROOT, reason="uid drop and namespaces need root")

# a uid range of this module's own: sandboxes that other test modules run at the same time (pytest-xdist)
# use the default range, so their processes are never taken for this module's leftovers
TEST_UID_BASE = UID_BASE + UID_COUNT
TESTS = "assert f(1) == 4\nassert f(2) == 5\n"
GOOD = "def f(x):\n    return x + 3\n"


@pytest.fixture(scope="module")
def box() -> Sandbox:
    return Sandbox(Limits(timeout_s=3.0, cpu_s=3), uid_base=TEST_UID_BASE)


class Runner:
    """Runs assert tests through one of the two runners (split: entry points given)."""

    def __init__(self, box: Sandbox, split: bool) -> None:
        self.box, self.split = box, split

    def run_assert(self, code: str, tests: str):
        return self.box.run_assert(code, tests, entry_points=["f"] if self.split else None)

    def __getattr__(self, name):
        return getattr(self.box, name)


@pytest.fixture(params=["split", "inprocess"])
def both(box, request) -> Runner:
    """Each runner in turn (for what depends on the runner)."""
    return Runner(box, request.param == "split")


@pytest.fixture
def sandbox(box) -> Runner:
    """The split runner, the default path (for what depends only on the process limits)."""
    return Runner(box, True)


def sandbox_processes() -> list[int]:
    """Live processes of this module's sandbox uids (root mode)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            uid = os.stat(f"/proc/{name}").st_uid
            with open(f"/proc/{name}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if TEST_UID_BASE <= uid < TEST_UID_BASE + UID_COUNT and state not in ("Z", "X"):
            found.append(int(name))
    return found


# long-lived helpers that are not the sandbox's: the task helpers, and multiprocessing's resource tracker,
# which lives as long as this process once any earlier test started processes through multiprocessing
# (tests/test_distributed.py spawns its two ranks that way)
NOT_LEFTOVERS = ("math_worker", "sandbox_helper", "multiprocessing.resource_tracker")


@pytest.fixture(autouse=True)
def no_leftovers():
    yield
    if ROOT:
        assert sandbox_processes() == [], "a sandbox process was left behind"
    children = [
        c
        for c in psutil.Process().children(recursive=True)
        if c.is_running()
        and c.status() != psutil.STATUS_ZOMBIE
        and not any(helper in a for a in c.cmdline() for helper in NOT_LEFTOVERS)
    ]
    assert children == [], "a child process was left behind"


def test_good_and_wrong_programs(both):
    assert both.run_assert(GOOD, TESTS).passed
    v = both.run_assert("def f(x):\n    return x + 2\n", TESTS)
    assert not v.passed and "AssertionError" in v.error
    v = both.run_assert("def f(x) return", TESTS)
    assert not v.passed and "SyntaxError" in v.error


@pytest.mark.parametrize(
    "code,why",
    [
        ("while True:\n    pass\n", "timeout"),
        ("import time\ntime.sleep(100)\n", "timeout"),
    ],
)
def test_infinite_loop_and_sleep_time_out(sandbox, code, why):
    start = time.monotonic()
    v = sandbox.run_assert(code, TESTS)
    assert not v.passed and why in v.error
    assert time.monotonic() - start < 3.0 + 2.0


@root_only
@pytest.mark.parametrize(
    "code",
    [
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        # children leave the session and the process group: only the uid still holds them
        "import os\nwhile True:\n    try:\n        if os.fork() == 0:\n            os.setsid()\n    except OSError:\n        pass\n",
    ],
)
def test_fork_bomb_is_bounded_and_killed(sandbox, code):
    before = len(os.listdir("/proc"))
    v = sandbox.run_assert(code, TESTS)
    assert not v.passed
    assert sandbox_processes() == []
    assert len(os.listdir("/proc")) < before + 50


def test_huge_allocation_fails(sandbox):
    v = sandbox.run_assert("x = bytearray(8 << 30)\n" + GOOD, TESTS)
    assert not v.passed and "MemoryError" in v.error


def test_output_flood_is_cut(sandbox):
    v = sandbox.run_assert("while True:\n    print('x' * 100000)\n", TESTS)
    assert not v.passed


def test_cannot_write_or_delete_outside(sandbox, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    victim.chmod(0o666)
    tmp_victim = f"/tmp/sandbox-victim-{os.getpid()}"
    with open(tmp_victim, "w") as f:
        f.write("keep me too")
    os.chmod(tmp_victim, 0o666)
    outside = [
        str(tmp_path / "evil.txt"),
        "/work/evil.txt",
        "/root/evil.txt",
        "/evil.txt",
        f"/tmp/evil-{os.getpid()}",
        "/var/tmp/evil",
        "/dev/shm/evil",
    ]
    code = (
        f"""
import os, shutil
for p in {outside!r}:
    try:
        open(p, "w").write("x")
    except OSError:
        pass
for p in {[str(victim), tmp_victim]!r}:
    for act in (os.remove, lambda q: open(q, "w").write("gone")):
        try:
            act(p)
        except OSError:
            pass
shutil.rmtree({str(tmp_path)!r}, ignore_errors=True)
"""
        + GOOD
    )
    sandbox.run_assert(code, TESTS)
    try:
        assert victim.read_text() == "keep me"
        with open(tmp_victim) as f:
            assert f.read() == "keep me too"
        for p in outside:
            assert not os.path.exists(p), p
    finally:
        os.remove(tmp_victim)


def test_files_inside_the_working_directory_are_fine(sandbox):
    code = "open('scratch.txt', 'w').write('ok')\nassert open('scratch.txt').read() == 'ok'\n" + GOOD
    assert sandbox.run_assert(code, TESTS).passed


@pytest.mark.parametrize(
    "code",
    [
        "import os\nos._exit(0)\n",
        "import sys\nsys.exit(0)\n",
        "raise SystemExit(0)\n",
        "print('All tests passed')\nimport os\nos._exit(0)\n",
        "import os\nprint(os.urandom(16).hex())\nos._exit(0)\n",
        "print('\\n' + '0' * 32 + '\\n')\nimport os\nos._exit(0)\n",
        # the token pipe is closed and the token is not in the environment or files
        "import os, sys\nfor fd in range(3, 64):\n    try:\n        sys.stdout.write(os.read(fd, 4096).decode())\n"
        "    except OSError:\n        pass\nprint(open('/proc/self/environ').read())\n"
        "print(open('/proc/self/cmdline').read())\nos._exit(0)\n",
        # a redefined harness: tests run after the candidate and define their own names
        "def check(candidate):\n    pass\ndef f(x):\n    return 0\n",
        "import builtins\nbuiltins.AssertionError = type('Nope', (Exception,), {})\ndef f(x):\n    return 0\n",
        "import atexit, os\natexit.register(lambda: os._exit(0))\ndef f(x):\n    return 0\n",
    ],
)
def test_early_exit_and_fake_success_score_zero(both, code):
    assert not both.run_assert(code, TESTS).passed


def test_killing_the_parent_fails_harmlessly(both):
    code = (
        "import os, signal\nfor p in (os.getppid(), -1):\n    try:\n        os.kill(p, signal.SIGKILL)\n"
        "    except OSError:\n        pass\n"
    )
    v = both.run_assert(code + "def f(x):\n    return 0\n", TESTS)
    assert not v.passed
    assert both.run_assert(GOOD, TESTS).passed  # this process is alive and still scoring


def test_network_scores_zero_without_hanging(sandbox):
    code = "import socket\ns = socket.create_connection(('1.1.1.1', 80), timeout=30)\n" + GOOD
    start = time.monotonic()
    v = sandbox.run_assert(code, TESTS)
    assert not v.passed
    assert time.monotonic() - start < 5


def test_no_network_inside(sandbox):
    code = (
        "import socket\ns = socket.socket()\ntry:\n    s.connect(('127.0.0.1', 22))\nexcept OSError as e:\n"
        "    assert e.errno in (101, 111, 99), e\nelse:\n    raise SystemExit('connected')\n" + GOOD
    )
    assert sandbox.run_assert(code, TESTS).passed


def test_background_processes_are_killed(sandbox):
    code = "import subprocess\nsubprocess.Popen(['sleep', '100'], start_new_session=True)\n" + GOOD
    assert sandbox.run_assert(code, TESTS).passed


@root_only
def test_runs_unprivileged_with_minimal_env(sandbox):
    code = (
        "import os\nassert os.getuid() != 0 and os.getgid() != 0 and os.getgroups() == []\n"
        "assert set(os.environ) <= {'PATH', 'LANG', 'LC_ALL', 'HOME', 'TMPDIR', 'PYTHONDONTWRITEBYTECODE'},"
        " os.environ\n" + GOOD
    )
    assert sandbox.run_assert(code, TESTS).passed


def test_programs_see_the_standard_library_only(both, box):
    """No site (python -S): a node's installed packages (Debian's /usr/lib/python3/dist-packages)
    are not on the path, so a reward never depends on what a machine has installed."""
    code = "import sys\nassert sys.flags.no_site and not [p for p in sys.path if 'packages' in p], sys.path\n"
    assert both.run_assert(code + "import json, re, collections\n" + GOOD, TESTS).passed
    ex = box.execute(["-c", "import sys; print(sys.flags.no_site, sys.flags.isolated)"])
    assert ex.stdout.split() == ["1", "1"], ex


def test_stdin_is_closed_for_assert_tests(both):
    assert both.run_assert("import sys\nassert sys.stdin.read() == ''\n" + GOOD, TESTS).passed


def test_concurrent_runs_are_independent(sandbox):
    results: list[bool] = []
    bad = "import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError:\n    pass\n"

    def run(code: str) -> None:
        results.append(sandbox.run_assert(code, TESTS).passed)

    threads = [threading.Thread(target=run, args=(GOOD if i % 2 else bad,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if ROOT:  # each run has its own uid, so kill(-1) only reaches itself
        assert sorted(results) == [False] * 4 + [True] * 4


def test_split_runner_defeats_introspection_and_eq_tricks(box):
    frame_walk = (
        "import sys, os\nf = sys._getframe()\nwhile f:\n    for v in list(f.f_locals.values()):\n"
        "        if isinstance(v, (bytes, str)) and len(v) == 32:\n"
        "            os.write(1, b'\\n' + (v if isinstance(v, bytes) else v.encode()) + b'\\n')\n"
        "    f = f.f_back\nos._exit(0)\n"
    )
    always_equal = "class E:\n    def __eq__(self, other):\n        return True\ndef f(x):\n    return E()\n"
    for code in (frame_walk, always_equal):
        assert not box.run_assert(code, TESTS, entry_points=["f"]).passed
    peek = (
        "import os\nfor path in ('/proc/%d/mem' % os.getppid(), '/proc/%d/environ' % os.getppid()):\n"
        "    try:\n        open(path, 'rb').read(1)\n    except OSError:\n        pass\n"
        "    else:\n        raise SystemExit('read the tester: ' + path)\n"
        "try:\n    os.listdir('/proc/%d/fd' % os.getppid())\nexcept OSError:\n    pass\n"
        "else:\n    raise SystemExit('listed the tester fds')\n" + GOOD
    )
    assert box.run_assert(peek, TESTS, entry_points=["f"]).passed  # every peek was refused


def test_stdio_right_and_wrong(sandbox):
    cases = [{"input": "1 2\n", "output": "3\n"}, {"input": "10 -4\n", "output": "6"}]
    assert sandbox.run_stdio("a, b = map(int, input().split())\nprint(a + b)\n", cases).passed
    v = sandbox.run_stdio("a, b = map(int, input().split())\nprint(a - b)\n", cases)
    assert not v.passed and "wrong output" in v.error
    v = sandbox.run_stdio("a, b = map(int, input().split())\nprint(a + b)\nraise SystemExit(1)\n", cases)
    assert not v.passed


def test_outputs_match_normalises_whitespace():
    assert outputs_match("1 2\n3\n", "1   2 3")
    assert outputs_match("0.5", "0.5000000001")
    assert not outputs_match("1 2", "1 2 3")
    assert not outputs_match("YES", "yes")


def test_runner_programs_are_modules_shipped_and_read_as_text():
    import importlib
    import tomllib

    for name in RUNNERS:
        text = runner_source(name)
        compile(text, f"{name}.py", "exec")
        importlib.import_module(f"trainer.tasks.runners.{name}")  # importing runs nothing
        assert text.rstrip().endswith('if __name__ == "__main__":\n    _main()')
    with pytest.raises(ValueError, match="unknown sandbox runner 'nope'"):
        runner_source("nope")
    pyproject = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert "tasks/runners/*.py" in pyproject["tool"]["setuptools"]["package-data"]["trainer"]
