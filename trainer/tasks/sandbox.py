"""Runs untrusted Python in a separate, isolated, resource-limited process; reward needs a per-run secret.

Each execution gets its own session (the whole process group is killed on timeout and always
afterwards), resource limits set in a preexec function (CPU, address space, file size,
processes, open files, no core dumps), a minimal environment and no stdin unless a test feeds
one. It runs under the job's own interpreter (`python -I -S`: isolated mode, the standard
library only), never a node's system Python, so a reward does not depend on the node. Its
isolation is one of the mechanisms of `trainer.tasks.sandbox_mechanisms` (root, bubblewrap or
an unprivileged user namespace; the view is `trainer.tasks.sandbox_view`'s), probed once per
job and logged: new mount, network and pid namespaces, a read-only view of the system and interpreter directories (no file of the job in
it) and a small private tmpfs as its working directory (/tmp, also at /var/tmp and /dev/shm);
under root also a uid of its own per concurrent execution (locked across processes with flock),
so RLIMIT_NPROC bounds a fork bomb and afterwards every process of that uid is killed. The pid
namespace dies with its first process, which dies with the sandbox's kill, so nothing the
program starts (setsid, double fork) outlives it. Where no mechanism works, the sandbox refuses
to start unless the job accepted running unisolated (`launcher.allow_unisolated_sandbox`).

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
`trainer.tasks.sandbox_isolation`; one process's files, pipes, start, wait and output in
`trainer.tasks.sandbox_process`; the runner programs and the isolation stub in `trainer.tasks.runners`.
"""

from __future__ import annotations

import logging
import math
import os
import pickle
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass

from trainer.tasks import sandbox_process as process
from trainer.tasks.runners import runner_source
from trainer.tasks.sandbox_isolation import (
    UID_BASE,
    UID_COUNT,
    Limits,
    UidLease,
    child_setup,
    kill_all,
)
from trainer.tasks.sandbox_mechanisms import (
    MECHANISMS,
    UNISOLATED,
    SandboxUnavailable,
    bwrap_command,
    choose,
    interpreter,
    view_spec,
)

__all__ = ["UID_BASE", "UID_COUNT", "Execution", "Limits", "Sandbox", "SandboxUnavailable", "Verdict", "outputs_match"]

log = logging.getLogger(__name__)
ROOT_BASE_DIR = "/run/trainer-sandbox"


@dataclass(frozen=True)
class Execution:
    """What one execution did."""

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    error: str | None = None  # could not run at all


@dataclass(frozen=True)
class Verdict:
    """Whether a program passed all its tests, and why not."""

    passed: bool
    error: str | None


class Sandbox:
    """Executes Python programs under the limits; thread-safe (one execution per call).

    `mechanism` is the isolation to use (probed once per job where None: see
    `sandbox_mechanisms.choose`, which raises SandboxUnavailable when none works and
    `allow_unisolated` is False); `python` the interpreter (default: the job's own).
    """

    def __init__(
        self,
        limits: Limits | None = None,
        python: str | None = None,
        mechanism: str | None = None,
        allow_unisolated: bool = False,
        uid_base: int = UID_BASE,
        uid_count: int = UID_COUNT,
    ) -> None:
        self.limits = limits or Limits()
        self.root = os.geteuid() == 0
        self.python = python or interpreter()
        self.uid_base, self.uid_count = uid_base, uid_count
        if self.root:
            self.base_dir = (
                ROOT_BASE_DIR
                if os.path.isdir(os.path.dirname(ROOT_BASE_DIR))
                else os.path.join(tempfile.gettempdir(), "trainer-sandbox-root")
            )
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
        if mechanism is not None and mechanism not in MECHANISMS + (UNISOLATED,):
            raise ValueError(f"unknown sandbox mechanism {mechanism!r}; one of {', '.join(MECHANISMS)}, {UNISOLATED}")
        self.mechanism = mechanism or choose(self.probe, self.root, self.python, allow_unisolated)

    def probe(self, mechanism: str) -> str | None:
        """Why `mechanism` cannot run a program here, or None when it can."""
        ex = self.execute(["-c", "print('sandbox probe ok')"], timeout_s=30, mechanism=mechanism)
        if ex.error or ex.timed_out:
            return ex.error or "the probe program timed out"
        if ex.returncode == 0 and ex.stdout.strip() == "sandbox probe ok":
            return None
        tail = [line for line in ex.stderr.strip().splitlines() if line.strip()]
        return (tail[-1].strip()[:300] if tail else "") or f"the probe program exited with {ex.returncode}"

    def _env(self, home: str) -> dict[str, str]:
        return {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "HOME": home,
            "TMPDIR": home,
            "PYTHONDONTWRITEBYTECODE": "1",
        }

    # -- one execution -------------------------------------------------------------------

    def execute(
        self,
        args: list[str],
        stdin: bytes | None = None,
        pipes: dict[str, bytes] | None = None,
        files: dict[str, str] | None = None,
        timeout_s: float | None = None,
        mechanism: str | None = None,
    ) -> Execution:
        """Run `python -I -S ARGS` in the sandbox; an arg `{name}` becomes a pipe fd or a file path.

        -S: the program sees the standard library only, whatever the node's Python has installed
        (a reward that does not depend on the machine), and starts faster (no site, no .pth files).

        `pipes` maps names to bytes fed through a pipe (its read end's number replaces `{name}`);
        `files` maps names to text written read-only beside (not in) the working directory, at
        /input inside the view (its path replaces `{name}`). stdin is empty (DEVNULL) unless given.
        `mechanism` overrides the sandbox's (the probe).
        """
        mechanism = mechanism or self.mechanism
        timeout_s = self.limits.timeout_s if timeout_s is None else timeout_s
        lease = UidLease(self.lock_dir, self.uid_base, self.uid_count) if mechanism == "root" else None
        uid = lease.uid if lease else None
        rundir = tempfile.mkdtemp(prefix="run-", dir=self.base_dir)
        proc = None
        clean = True  # until a process of the uid is started
        readers: list[int] = []
        writers: list[tuple[int, bytes]] = []
        try:
            os.chmod(rundir, 0o711 if self.root else 0o700)
            input_dir, subst = process.write_files(rundir, files or {}, mechanism == UNISOLATED)
            process.open_pipes(pipes or {}, subst, readers, writers)
            program = [self.python, "-I", "-S"] + [_substitute(a, subst) for a in args]
            argv, cwd, home, view = self._command(mechanism, program, rundir, input_dir, uid)
            out, err = tempfile.TemporaryFile(dir=rundir), tempfile.TemporaryFile(dir=rundir)
            setup = child_setup(self.limits, uid, view)
            try:
                proc = process.start(
                    argv, cwd, self._env(home), setup, process.stdin_file(rundir, stdin), out, err, readers
                )
            except (OSError, subprocess.SubprocessError) as e:
                log.warning("sandbox could not start %s: %s", argv[0], e)
                return Execution(None, "", "", False, f"sandbox could not start: {e}")
            while writers:
                process.feed(*writers.pop())
            timed_out = not process.wait_exit(proc, timeout_s)
            clean = kill_all(session=proc.pid, uid=uid)
            returncode = proc.wait()
            stdout, stderr = (process.read_capped(f, self.limits.output_bytes) for f in (out, err))
            return Execution(None if timed_out else returncode, stdout, stderr, timed_out)
        finally:
            for fd in readers + [w for w, _ in writers]:
                os.close(fd)
            if proc is not None and proc.returncode is None:
                clean = kill_all(session=proc.pid, uid=uid)
                proc.wait()
            shutil.rmtree(rundir, ignore_errors=True)
            if lease:
                lease.release(clean)

    def _command(
        self, mechanism: str, program: list[str], rundir: str, input_dir: str | None, uid: int | None
    ) -> tuple[list[str], str, str, dict | None]:
        """(argv, working directory to start in, HOME as the program sees it, `sandbox_view` spec)."""
        if mechanism == UNISOLATED:
            cwd = os.path.join(rundir, "work")
            os.mkdir(cwd, 0o700)
            return program, cwd, cwd, None
        newroot = os.path.join(rundir, "root")
        os.mkdir(newroot, 0o755)
        if mechanism == "bwrap":
            return bwrap_command(program, self.python, input_dir, self.limits.tmpfs_mb), rundir, "/tmp", None
        return program, rundir, "/tmp", view_spec(mechanism, self.python, newroot, input_dir, self.limits.tmpfs_mb, uid)

    # -- test kinds ----------------------------------------------------------------------

    def run_assert(self, code: str, tests: str, prelude: str = "", entry_points: list[str] | None = None) -> Verdict:
        """Pass when `tests` (assert-style, raising on failure) run to the end against `code`.

        With `entry_points` (the names the tests call), the tests run in a separate process
        from the candidate (runners/split.py); without, in the candidate's process (runners/in_process.py).
        """
        token = os.urandom(16).hex()
        if entry_points:
            secret = {"token": token, "prelude": prelude, "tests": tests, "entry_points": list(entry_points)}
            pipes = {"secret": pickle.dumps(secret, 4), "code": pickle.dumps({"prelude": prelude, "code": code}, 4)}
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
            ex = self.execute(
                ["{candidate.py}"],
                stdin=str(case.get("input", "")).encode(),
                files={"candidate.py": code},
                timeout_s=min(self.limits.timeout_s, left),
            )
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
