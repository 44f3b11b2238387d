"""Runs untrusted Python in a separate, resource-limited process; reward needs a per-run secret.

Each execution gets a fresh working directory, its own session (the whole process group is
killed on timeout and always afterwards), resource limits set in a preexec function (CPU,
address space, file size, processes, open files, no core dumps), a minimal environment and
no stdin unless a test feeds one. When the parent is root the child also:

- runs as its own unprivileged uid (and gid) taken from a reserved range, one per concurrent
  execution (locked across processes with flock), so RLIMIT_NPROC bounds a fork bomb, the
  execution cannot signal or read other executions, and afterwards every process of that uid
  is killed, which nothing the candidate does (setsid, double fork) can escape;
- gets new mount and network namespaces: no network (loopback only, down), and a small tmpfs
  as its working directory, also mounted over the world-writable directories (/tmp, /var/tmp,
  /dev/shm, /run/lock), so it can write nowhere else on the machine and leaves nothing behind.

Without root (e.g. a cluster job) the program runs as the trainer's own user, without
namespaces: limits, timeouts and the token still hold, but it could signal that user's
processes or write that user's files and reach the network, RLIMIT_NPROC counts all the
user's processes (set to the current count + `nproc`), and cleanup finds processes by
session and process group, which setsid escapes. Run the trainer as root in a container
(or as a user allowed to setuid) for the full isolation.

Assert-style tests pass only when the runner prints a random per-execution token that the
parent hands it through a pipe, read to the end and closed before any candidate code runs
(never in argv, the environment or a file). Two runners:

- runners/split.py (tests that name their entry points: HumanEval, synthetic, functional tests):
  the tester process holds the token and the tests, makes itself non-dumpable, and forks the
  candidate process before reading them; the candidate process only ever sees the prelude and
  its code, and answers calls to its entry points with plain data (a restricted pickle). So
  early exits, fake success output, a redefined `check`, objects whose __eq__ always holds,
  peeking at the runner's frames or memory, or reading the hidden tests all score 0.
- runners/in_process.py (other assert tests): prelude, candidate and tests in one process. Early exits,
  printed fake successes and a redefined `check` score 0, but code that deliberately inspects
  the runner (frames, gc) could find the token, and __eq__ tricks work: prefer entry points.

The limits, the child's setup before exec, uid leases and process cleanup live in
`trainer.tasks.sandbox_isolation`; the runner programs in `trainer.tasks.runners`.
"""

from __future__ import annotations

import logging
import math
import os
import pickle
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from trainer.tasks.runners import runner_source
from trainer.tasks.sandbox_isolation import (
    UID_BASE,
    UID_COUNT,
    Limits,
    UidLease,
    child_setup,
    kill_all,
)

__all__ = ["UID_BASE", "UID_COUNT", "Execution", "Limits", "Sandbox", "Verdict", "outputs_match"]

log = logging.getLogger(__name__)
SYSTEM_PYTHON = "/usr/bin/python3"
ROOT_BASE_DIR = "/run/trainer-sandbox"
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


@dataclass(frozen=True)
class Execution:
    """What one execution did."""

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    error: str | None = None     # could not run at all


@dataclass(frozen=True)
class Verdict:
    """Whether a program passed all its tests, and why not."""

    passed: bool
    error: str | None


class Sandbox:
    """Executes Python programs under the limits; thread-safe (one execution per call)."""

    def __init__(self, limits: Limits | None = None, python: str | None = None,
                 isolate: bool = True, uid_base: int = UID_BASE, uid_count: int = UID_COUNT) -> None:
        self.limits = limits or Limits()
        self.root = os.geteuid() == 0
        if python is None:
            python = SYSTEM_PYTHON if os.path.exists(SYSTEM_PYTHON) or self.root else sys.executable
        self.python = python
        self.uid_base, self.uid_count = uid_base, uid_count
        self.isolate = isolate and self.root
        self._namespaces: bool | None = None
        self._probe_lock = threading.Lock()
        if self.root:
            self.base_dir = ROOT_BASE_DIR if os.path.isdir(os.path.dirname(ROOT_BASE_DIR)) \
                else os.path.join(tempfile.gettempdir(), "trainer-sandbox-root")
            os.makedirs(self.base_dir, mode=0o711, exist_ok=True)
            st = os.lstat(self.base_dir)
            if st.st_uid != 0 or not os.path.isdir(self.base_dir) or os.path.islink(self.base_dir):
                raise RuntimeError(f"{self.base_dir}: sandbox base directory not owned by root")
            os.chmod(self.base_dir, 0o711)
            self.lock_dir = os.path.join(self.base_dir, "locks")
            os.makedirs(self.lock_dir, mode=0o700, exist_ok=True)
            os.chmod(self.lock_dir, 0o700)
        else:
            self.base_dir = tempfile.gettempdir()
            self.lock_dir = ""
        self.shadowed = sorted({os.path.realpath(d) for d in WORLD_WRITABLE
                                if os.path.isdir(d) and os.stat(d).st_mode & 0o002})

    # -- process setup -------------------------------------------------------------------

    def namespaces_available(self) -> bool:
        """Whether mount+network namespaces work here (probed once, root only)."""
        if not self.isolate:
            return False
        with self._probe_lock:
            if self._namespaces is None:
                scratch = tempfile.mkdtemp(prefix="probe-", dir=self.base_dir)
                try:  # the same unshare and mounts as a real execution, as root
                    r = subprocess.run(["/bin/true"], preexec_fn=child_setup(self.limits, None, scratch, True, self.shadowed, probe=True),
                                       timeout=30, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    self._namespaces = r.returncode == 0
                except (OSError, subprocess.SubprocessError) as e:
                    log.warning("sandbox: no mount/network namespaces here (%s); isolating by uid only", e)
                    self._namespaces = False
                finally:
                    shutil.rmtree(scratch, ignore_errors=True)
            return self._namespaces

    def _env(self, workdir: str) -> dict[str, str]:
        return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
                "HOME": workdir, "TMPDIR": workdir if not self.namespaces_available() else "/tmp",
                "PYTHONDONTWRITEBYTECODE": "1"}

    # -- one execution -------------------------------------------------------------------

    def execute(self, args: list[str], stdin: bytes | None = None, pipes: dict[str, bytes] | None = None,
                files: dict[str, str] | None = None, timeout_s: float | None = None) -> Execution:
        """Run `python -I -S ARGS` in the sandbox; an arg `{name}` becomes a pipe fd or a file path.

        -S: the program sees the standard library only, whatever the node's Python has installed
        (a reward that does not depend on the machine), and starts faster (no site, no .pth files).

        `pipes` maps names to bytes fed through a pipe (its read end's number replaces `{name}`);
        `files` maps names to text written read-only next to (not in) the working directory
        (its path replaces `{name}`). stdin is empty (DEVNULL) unless given.
        """
        timeout_s = self.limits.timeout_s if timeout_s is None else timeout_s
        lease = UidLease(self.lock_dir, self.uid_base, self.uid_count) if self.root else None
        uid = lease.uid if lease else None
        rundir = tempfile.mkdtemp(prefix="run-", dir=self.base_dir)
        proc = None
        clean = True  # until a process of the uid is started
        readers: list[int] = []
        writers: list[tuple[int, bytes]] = []
        try:
            workdir = self._make_workdir(rundir, uid)
            subst = self._write_files(rundir, files or {})
            for name, data in (pipes or {}).items():
                r, w = os.pipe()
                readers.append(r)
                writers.append((w, data))
                subst[name] = str(r)
            argv = [self.python, "-I", "-S"] + [_substitute(a, subst) for a in args]
            out = tempfile.TemporaryFile(dir=rundir)
            err = tempfile.TemporaryFile(dir=rundir)
            inp = None
            if stdin is not None:
                inp = tempfile.TemporaryFile(dir=rundir)
                inp.write(stdin)
                inp.seek(0)
            setup = child_setup(self.limits, uid, workdir, self.namespaces_available(), self.shadowed)
            try:
                proc = self._start(argv, workdir, setup, inp, out, err, readers)
            except (OSError, subprocess.SubprocessError) as e:
                log.warning("sandbox could not start %s: %s", self.python, e)
                return Execution(None, "", "", False, f"sandbox could not start: {e}")
            while writers:
                self._feed(*writers.pop())
            timed_out = not self._wait_exit(proc, timeout_s)
            clean = kill_all(session=proc.pid, uid=uid)
            returncode = proc.wait()
            return Execution(None if timed_out else returncode, self._read(out), self._read(err), timed_out)
        finally:
            for fd in readers + [w for w, _ in writers]:
                os.close(fd)
            if proc is not None and proc.returncode is None:
                clean = kill_all(session=proc.pid, uid=uid)
                proc.wait()
            shutil.rmtree(rundir, ignore_errors=True)
            if lease:
                lease.release(clean)

    def _make_workdir(self, rundir: str, uid: int | None) -> str:
        """The execution's working directory inside `rundir`, owned by its uid."""
        os.chmod(rundir, 0o711 if self.root else 0o700)
        workdir = os.path.join(rundir, "work")
        os.mkdir(workdir, 0o700)
        if uid is not None:
            os.chown(workdir, uid, uid)
        return workdir

    @staticmethod
    def _write_files(rundir: str, files: dict[str, str]) -> dict[str, str]:
        """Write each file read-only into `rundir`; {name: path}."""
        paths = {}
        for name, text in files.items():
            path = os.path.join(rundir, name)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(path, 0o644)
            paths[name] = path
        return paths

    def _start(self, argv: list[str], workdir: str, setup: Callable[[], None], inp: IO[bytes] | None,
               out: IO[bytes], err: IO[bytes], readers: list[int]) -> subprocess.Popen:
        """Start the program in its own session; closes stdin's file and the pipes' read ends."""
        try:
            return subprocess.Popen(
                argv, cwd=workdir, env=self._env(workdir),
                stdin=inp if inp is not None else subprocess.DEVNULL, stdout=out, stderr=err,
                pass_fds=tuple(readers), close_fds=True, start_new_session=True,
                preexec_fn=setup,
            )
        finally:
            if inp is not None:
                inp.close()
            for r in readers:
                os.close(r)
            readers.clear()

    @staticmethod
    def _feed(wfd: int, payload: bytes) -> None:
        """Write the payload into the pipe (in a thread when it exceeds the pipe buffer) and close it."""
        def feed() -> None:
            try:
                view = memoryview(payload)
                while view:
                    n = os.write(wfd, view)
                    view = view[n:]
            except OSError:
                pass
            finally:
                os.close(wfd)
        if len(payload) <= 60000:
            feed()
        else:
            threading.Thread(target=feed, daemon=True).start()

    @staticmethod
    def _wait_exit(proc: subprocess.Popen, timeout_s: float) -> bool:
        """Wait until the process exits without reaping it (pidfd); False on timeout."""
        try:
            pidfd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            try:
                proc.wait(timeout=timeout_s)
                return True
            except subprocess.TimeoutExpired:
                return False
        try:
            ready, _, _ = select.select([pidfd], [], [], timeout_s)
            return bool(ready)
        finally:
            os.close(pidfd)

    def _read(self, f) -> str:
        """The captured output, cut to output_bytes (head and tail kept)."""
        cap = self.limits.output_bytes
        size = f.seek(0, os.SEEK_END)
        f.seek(0)
        if size <= cap:
            data = f.read()
        else:
            head = f.read(cap // 2)
            f.seek(size - cap // 2)
            data = head + b"\n...[output cut]...\n" + f.read()
        f.close()
        return data.decode("utf-8", "replace")

    # -- test kinds ----------------------------------------------------------------------

    def run_assert(self, code: str, tests: str, prelude: str = "",
                   entry_points: list[str] | None = None) -> Verdict:
        """Pass when `tests` (assert-style, raising on failure) run to the end against `code`.

        With `entry_points` (the names the tests call), the tests run in a separate process
        from the candidate (runners/split.py); without, in the candidate's process (runners/in_process.py).
        """
        token = os.urandom(16).hex()
        if entry_points:
            secret = {"token": token, "prelude": prelude, "tests": tests, "entry_points": list(entry_points)}
            pipes = {"secret": pickle.dumps(secret, 4),
                     "code": pickle.dumps({"prelude": prelude, "code": code}, 4)}
            ex = self.execute(["-c", runner_source("split"), "{secret}", "{code}"], pipes=pipes)
        else:
            payload = pickle.dumps({"token": token, "prelude": prelude, "code": code, "tests": tests}, 4)
            ex = self.execute(["-c", runner_source("in_process"), "{secret}"], pipes={"secret": payload})
        if ex.error:
            return Verdict(False, ex.error)
        if ex.timed_out:
            return Verdict(False, f"timeout after {self.limits.timeout_s:g}s")
        ok = ex.returncode == 0 and token in ex.stdout[-4096:].split()
        if ok:
            return Verdict(True, None)
        return Verdict(False, _failure(ex))

    def run_stdio(self, code: str, cases: list[dict], total_timeout_s: float | None = None) -> Verdict:
        """Pass when the program, run once per case with its input, prints its output, exiting 0."""
        if not cases:
            return Verdict(False, "no test cases")
        budget = total_timeout_s if total_timeout_s is not None else max(60.0, 3 * self.limits.timeout_s)
        start = time.monotonic()
        for i, case in enumerate(cases):
            left = budget - (time.monotonic() - start)
            if left <= 0:
                return Verdict(False, f"case {i}: total timeout of {budget:g}s")
            ex = self.execute(["{candidate.py}"], stdin=str(case.get("input", "")).encode(),
                              files={"candidate.py": code}, timeout_s=min(self.limits.timeout_s, left))
            if ex.error:
                return Verdict(False, ex.error)
            if ex.timed_out:
                return Verdict(False, f"case {i}: timeout")
            if ex.returncode != 0:
                return Verdict(False, f"case {i}: {_failure(ex)}")
            if not outputs_match(str(case.get("output", "")), ex.stdout):
                return Verdict(False, f"case {i}: wrong output")
        return Verdict(True, None)


def _substitute(arg: str, subst: dict[str, str]) -> str:
    """`{name}` replaced by subst[name] when named there, any other argument as given."""
    return subst.get(arg[1:-1], arg) if arg[:1] == "{" and arg[-1:] == "}" else arg


def _failure(ex: Execution) -> str:
    """A one-line reason an execution failed."""
    tail = [line for line in ex.stderr.strip().splitlines() if line.strip()]
    why = tail[-1].strip()[:500] if tail else ""
    code = ex.returncode
    if code is not None and code < 0:
        if -code == signal.SIGXCPU:
            return "timeout (CPU time limit)"
        if -code == signal.SIGXFSZ:
            return "file size limit exceeded (output too large)"
        try:
            sig = signal.Signals(-code).name
        except ValueError:
            sig = str(-code)
        return f"killed by {sig}" + (f" ({why})" if why else "")
    if code == 0:
        return "exited before the tests finished"
    return why or f"exit code {code}"


def _token_equal(a: str, b: str) -> bool:
    if a == b:
        return True
    if "." not in a + b and "e" not in (a + b).lower():
        return False
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return math.isfinite(x) and math.isfinite(y) and math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-6)


def outputs_match(expected: str, got: str) -> bool:
    """Token-wise equality after whitespace normalisation (floats within 1e-6)."""
    e, g = expected.split(), got.split()
    return len(e) == len(g) and all(_token_equal(x, y) for x, y in zip(e, g))
