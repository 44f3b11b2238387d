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

- RUNNER_SPLIT (tests that name their entry points: HumanEval, synthetic, functional tests):
  the tester process holds the token and the tests, makes itself non-dumpable, and forks the
  candidate process before reading them; the candidate process only ever sees the prelude and
  its code, and answers calls to its entry points with plain data (a restricted pickle). So
  early exits, fake success output, a redefined `check`, objects whose __eq__ always holds,
  peeking at the runner's frames or memory, or reading the hidden tests all score 0.
- RUNNER (other assert tests): prelude, candidate and tests in one process. Early exits,
  printed fake successes and a redefined `check` score 0, but code that deliberately inspects
  the runner (frames, gc) could find the token, and __eq__ tricks work: prefer entry points.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import logging
import math
import os
import pickle
import random
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)
SYSTEM_PYTHON = "/usr/bin/python3"
UID_BASE = 0x5AFE0000  # reserved uids for sandboxed executions (no passwd entries needed)
UID_COUNT = 64
ROOT_BASE_DIR = "/run/trainer-sandbox"
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x1000, 0x4000, 0x40000

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)

# The in-process runner, for assert tests that do not name entry points: run as
# `python -I -c RUNNER SECRET_FD`, it reads a pickled {"token", "prelude", "code", "tests"} from the
# pipe to EOF and closes it before running anything, then runs prelude, candidate and tests
# in one namespace (restoring builtins before the tests).
RUNNER = r'''
import os, sys
def _main():
    fd = int(sys.argv[1])
    parts = []
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            break
        parts.append(b)
    os.close(fd)
    import pickle, builtins
    p = pickle.loads(b"".join(parts))
    del parts
    write, exit_, tok = os.write, os._exit, p.pop("token").encode()
    saved = dict(builtins.__dict__)
    ns = {"__name__": "__sandbox__", "__builtins__": builtins}
    stage = "prelude"
    try:
        if p["prelude"]:
            exec(compile(p["prelude"], "<prompt>", "exec"), ns)
        stage = "candidate"
        exec(compile(p["code"], "<candidate>", "exec"), ns)
        builtins.__dict__.clear()
        builtins.__dict__.update(saved)
        stage = "tests"
        exec(compile(p.pop("tests"), "<tests>", "exec"), ns)
    except BaseException as e:
        try:
            msg = "%s: %s: %s" % (stage, type(e).__name__, e)
        except BaseException:
            msg = "%s: exception" % stage
        write(2, ("\n" + msg[-2000:]).encode("utf-8", "replace"))
        exit_(1)
    write(1, b"\n" + tok + b"\n")
    exit_(0)
_main()
'''

# The split runner, run as `python -I -c RUNNER_SPLIT SECRET_FD CODE_FD`, used when the
# tests name the candidate's entry points. It makes itself non-dumpable (so processes of the
# same uid cannot read its memory or fds), then forks the candidate process C, which closes
# SECRET_FD, reads {"prelude", "code"} from CODE_FD, runs them and serves calls to its
# entry points over pipes. The tester T (this process) closes CODE_FD, reads
# {"token", "prelude", "tests", "entry_points"} from SECRET_FD, binds each entry point to a
# proxy that calls into C, runs the tests and prints the token when all pass. C never holds
# the token or the tests, and its results reach T only as plain data (a pickle restricted to
# builtin containers and scalars), so no candidate code runs in T.
RUNNER_SPLIT = r'''
import os, sys, io, pickle, struct, ctypes, builtins
def _read_all(fd):
    parts = []
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            break
        parts.append(b)
    os.close(fd)
    return b"".join(parts)
def _send(fd, data):
    data = struct.pack(">I", len(data)) + data
    while data:
        data = data[os.write(fd, data):]
def _recv(fd):
    buf = b""
    while len(buf) < 4:
        b = os.read(fd, 4 - len(buf))
        if not b:
            return None
        buf += b
    n = struct.unpack(">I", buf)[0]
    parts, got = [], 0
    while got < n:
        b = os.read(fd, min(n - got, 1 << 20))
        if not b:
            return None
        parts.append(b)
        got += len(b)
    return b"".join(parts)
def _candidate(code_fd, req_r, resp_w, libc):
    p = pickle.loads(_read_all(code_fd))
    libc.prctl(4, 1, 0, 0, 0)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)
    ns = {"__name__": "__sandbox__"}
    status = None
    try:
        if p["prelude"]:
            exec(compile(p["prelude"], "<prompt>", "exec"), ns)
        exec(compile(p["code"], "<candidate>", "exec"), ns)
    except BaseException as e:
        try:
            status = "candidate: %s: %s" % (type(e).__name__, e)
        except BaseException:
            status = "candidate: exception"
    dumps, send, recv, exit_ = pickle.dumps, _send, _recv, os._exit
    while True:
        msg = recv(req_r)
        if msg is None:
            exit_(0)
        if status:
            send(resp_w, dumps(("err", status), 4))
            continue
        try:
            name, args, kwargs = pickle.loads(msg)
            fn = ns.get(name)
            sol = ns.get("Solution")
            if isinstance(sol, type) and hasattr(sol, name) and not callable(fn):
                fn = getattr(sol(), name)
            if not callable(fn):
                raise NameError("the program does not define %s" % name)
            reply = dumps(("ok", fn(*args, **kwargs)), 4)
        except BaseException as e:
            try:
                reply = dumps(("err", "%s: %s" % (type(e).__name__, e)), 4)
            except BaseException:
                reply = dumps(("err", "exception"), 4)
        send(resp_w, reply)
class _Plain(pickle.Unpickler):
    def find_class(self, module, name):
        if module == "builtins" and name in ("set", "frozenset", "complex", "slice", "range"):
            return getattr(builtins, name)
        raise pickle.UnpicklingError("the program returned a non-plain value (%s.%s)" % (module, name))
class CandidateError(Exception):
    pass
def _main():
    secret_fd, code_fd = int(sys.argv[1]), int(sys.argv[2])
    libc = ctypes.CDLL(None)
    if libc.prctl(4, 0, 0, 0, 0) != 0:
        os._exit(3)
    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(secret_fd)
        os.close(req_w)
        os.close(resp_r)
        _candidate(code_fd, req_r, resp_w, libc)
        os._exit(0)
    os.close(code_fd)
    os.close(req_r)
    os.close(resp_w)
    p = pickle.loads(_read_all(secret_fd))
    tok = p.pop("token").encode()
    def proxy(name):
        def call(*args, **kwargs):
            _send(req_w, pickle.dumps((name, args, kwargs), 4))
            reply = _recv(resp_r)
            if reply is None:
                raise CandidateError("the program's process ended")
            r = _Plain(io.BytesIO(reply)).load()
            if not (type(r) is tuple and len(r) == 2 and r[0] in ("ok", "err")):
                raise CandidateError("malformed reply")
            if r[0] == "err":
                raise CandidateError(r[1])
            return r[1]
        call.__name__ = name
        return call
    ns = {"__name__": "__sandbox__"}
    stage = "prelude"
    try:
        if p["prelude"]:
            exec(compile(p["prelude"], "<prompt>", "exec"), ns)
        for name in p["entry_points"]:
            ns[name] = proxy(name)
        stage = "tests"
        exec(compile(p["tests"], "<tests>", "exec"), ns)
    except BaseException as e:
        try:
            msg = "%s: %s: %s" % (stage, type(e).__name__, e)
        except BaseException:
            msg = "%s: exception" % stage
        os.write(2, ("\n" + msg[-2000:]).encode("utf-8", "replace"))
        os.kill(pid, 9)
        os._exit(1)
    os.write(1, b"\n" + tok + b"\n")
    os.kill(pid, 9)
    os._exit(0)
_main()
'''


@dataclass(frozen=True)
class Limits:
    """Resource limits of one execution."""

    timeout_s: float = 10.0      # wall clock
    cpu_s: int = 10              # RLIMIT_CPU
    memory_mb: int = 2048        # RLIMIT_AS
    file_size_mb: int = 16       # RLIMIT_FSIZE (also bounds captured stdout/stderr)
    nproc: int = 32              # RLIMIT_NPROC (processes of the sandbox uid)
    nofile: int = 128            # RLIMIT_NOFILE
    tmpfs_mb: int = 64           # size of the working-directory tmpfs (root only)
    output_bytes: int = 1 << 20  # stdout/stderr kept in memory


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


def _proc_stat(pid: str) -> tuple[str, int, int, int] | None:
    """(state, pgrp, session, real uid) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("utf-8", "replace")
        fields = stat[stat.rindex(")") + 2:].split()
        uid = os.stat(f"/proc/{pid}").st_uid
        return fields[0], int(fields[2]), int(fields[3]), uid
    except (OSError, ValueError, IndexError):
        return None


def leftover_processes(session: int | None = None, uid: int | None = None) -> list[int]:
    """Live (non-zombie) processes owned by `uid` when given, else in `session` (session or group id)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        if uid is not None:
            try:
                if os.stat(f"/proc/{name}").st_uid != uid:
                    continue
            except OSError:
                continue
        st = _proc_stat(name)
        if st is None or st[0] in ("Z", "X"):
            continue
        if uid is not None or session in (st[1], st[2]):
            found.append(int(name))
    return found


def kill_all(session: int | None = None, uid: int | None = None, rounds: int = 200) -> bool:
    """SIGKILL the process group `session`, then every process of `uid` (when given, else of the
    session) until none is left; True when none is."""
    me = os.getpid()
    for _ in range(rounds):
        if session is not None:
            try:
                os.killpg(session, signal.SIGKILL)
            except OSError:
                pass
        pids = [p for p in leftover_processes(session, uid) if p != me]
        if not pids:
            return True
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.002)
    return not leftover_processes(session, uid)


class _UidLease:
    """An exclusive hold on one sandbox uid, across threads and processes (flock)."""

    def __init__(self, lock_dir: str, base: int, count: int) -> None:
        self.fd = -1
        self.uid = -1
        order = list(range(count))
        random.shuffle(order)
        while self.fd < 0:
            for i in order:
                fd = os.open(os.path.join(lock_dir, str(base + i)), os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    os.close(fd)
                    continue
                self.fd, self.uid = fd, base + i
                break
            else:
                time.sleep(0.01)
        if os.pread(self.fd, 5, 0) != b"clean":
            kill_all(uid=self.uid)  # what a crashed previous holder may have left
        os.pwrite(self.fd, b"dirty", 0)

    def release(self, clean: bool) -> None:
        """Give the uid back, marked clean when no process of it is left."""
        if self.fd >= 0:
            if clean:
                os.pwrite(self.fd, b"clean", 0)
            os.close(self.fd)
            self.fd = -1


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    if _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount {target}: {os.strerror(e)}")


def _count_own_processes() -> int:
    """How many processes (any state) this process's real uid has."""
    uid = os.getuid()
    n = 0
    for name in os.listdir("/proc"):
        try:
            n += name.isdigit() and os.stat(f"/proc/{name}").st_uid == uid
        except OSError:
            pass
    return n


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
                    r = subprocess.run(["/bin/true"], preexec_fn=self._preexec(None, scratch, True, probe=True),
                                       timeout=30, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    self._namespaces = r.returncode == 0
                except (OSError, subprocess.SubprocessError) as e:
                    log.warning("sandbox: no mount/network namespaces here (%s); isolating by uid only", e)
                    self._namespaces = False
                finally:
                    shutil.rmtree(scratch, ignore_errors=True)
            return self._namespaces

    def _preexec(self, uid: int | None, workdir: str, namespaces: bool, probe: bool = False):
        """The function run in the child before exec: namespaces and mounts, limits, uid drop."""
        lim = self.limits
        nproc = lim.nproc if uid is not None else _count_own_processes() + lim.nproc
        rlimits = [
            (resource.RLIMIT_CPU, lim.cpu_s, lim.cpu_s + 1),
            (resource.RLIMIT_AS, lim.memory_mb << 20, lim.memory_mb << 20),
            (resource.RLIMIT_FSIZE, lim.file_size_mb << 20, lim.file_size_mb << 20),
            (resource.RLIMIT_NPROC, nproc, nproc),
            (resource.RLIMIT_NOFILE, lim.nofile, lim.nofile),
            (resource.RLIMIT_CORE, 0, 0),
        ]
        if uid is None:  # cannot raise hard limits: clamp to what we have
            clamped = []
            for res, soft, hard in rlimits:
                cur_hard = resource.getrlimit(res)[1]
                if cur_hard != resource.RLIM_INFINITY:
                    hard = min(hard, cur_hard)
                clamped.append((res, min(soft, hard), hard))
            rlimits = clamped
        owner = 0 if uid is None else uid
        tmpfs = f"size={lim.tmpfs_mb}m,mode=0700,uid={owner},gid={owner}"
        shadowed = self.shadowed

        def preexec() -> None:
            if namespaces:
                if _libc.unshare(CLONE_NEWNS | CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "unshare")
                _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
                _mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV, tmpfs)
                for d in shadowed:
                    _mount(workdir, d, None, MS_BIND, None)
                os.chdir(workdir)
            if probe:
                return
            for res, soft, hard in rlimits:
                resource.setrlimit(res, (soft, hard))
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)

        return preexec

    def _env(self, workdir: str) -> dict[str, str]:
        return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
                "HOME": workdir, "TMPDIR": workdir if not self.namespaces_available() else "/tmp",
                "PYTHONDONTWRITEBYTECODE": "1"}

    # -- one execution -------------------------------------------------------------------

    def execute(self, args: list[str], stdin: bytes | None = None, pipes: dict[str, bytes] | None = None,
                files: dict[str, str] | None = None, timeout_s: float | None = None) -> Execution:
        """Run `python -I ARGS` in the sandbox; an arg `{name}` becomes a pipe fd or a file path.

        `pipes` maps names to bytes fed through a pipe (its read end's number replaces `{name}`);
        `files` maps names to text written read-only next to (not in) the working directory
        (its path replaces `{name}`). stdin is empty (DEVNULL) unless given.
        """
        timeout_s = self.limits.timeout_s if timeout_s is None else timeout_s
        lease = _UidLease(self.lock_dir, self.uid_base, self.uid_count) if self.root else None
        uid = lease.uid if lease else None
        rundir = tempfile.mkdtemp(prefix="run-", dir=self.base_dir)
        proc = None
        clean = True  # until a process of the uid is started
        readers: list[int] = []
        writers: list[tuple[int, bytes]] = []
        try:
            os.chmod(rundir, 0o711 if self.root else 0o700)
            workdir = os.path.join(rundir, "work")
            os.mkdir(workdir, 0o700)
            if uid is not None:
                os.chown(workdir, uid, uid)
            subst = {}
            for name, text in (files or {}).items():
                path = os.path.join(rundir, name)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
                os.chmod(path, 0o644)
                subst[name] = path
            for name, data in (pipes or {}).items():
                r, w = os.pipe()
                readers.append(r)
                writers.append((w, data))
                subst[name] = str(r)
            argv = [self.python, "-I"] + [subst.get(a[1:-1], a) if a[:1] == "{" and a[-1:] == "}" else a
                                          for a in args]
            out = tempfile.TemporaryFile(dir=rundir)
            err = tempfile.TemporaryFile(dir=rundir)
            inp = None
            if stdin is not None:
                inp = tempfile.TemporaryFile(dir=rundir)
                inp.write(stdin)
                inp.seek(0)
            namespaces = self.namespaces_available()
            try:
                proc = subprocess.Popen(
                    argv, cwd=workdir, env=self._env(workdir),
                    stdin=inp if inp is not None else subprocess.DEVNULL, stdout=out, stderr=err,
                    pass_fds=tuple(readers), close_fds=True, start_new_session=True,
                    preexec_fn=self._preexec(uid, workdir, namespaces),
                )
            except (OSError, subprocess.SubprocessError) as e:
                log.warning("sandbox could not start %s: %s", self.python, e)
                return Execution(None, "", "", False, f"sandbox could not start: {e}")
            finally:
                if inp is not None:
                    inp.close()
                for r in readers:
                    os.close(r)
                readers.clear()
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
        from the candidate (RUNNER_SPLIT); without, in the candidate's process (RUNNER).
        """
        token = os.urandom(16).hex()
        if entry_points:
            secret = {"token": token, "prelude": prelude, "tests": tests, "entry_points": list(entry_points)}
            pipes = {"secret": pickle.dumps(secret, 4),
                     "code": pickle.dumps({"prelude": prelude, "code": code}, 4)}
            ex = self.execute(["-c", RUNNER_SPLIT, "{secret}", "{code}"], pipes=pipes)
        else:
            payload = pickle.dumps({"token": token, "prelude": prelude, "code": code, "tests": tests}, 4)
            ex = self.execute(["-c", RUNNER, "{secret}"], pipes={"secret": payload})
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
