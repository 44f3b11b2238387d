"""What isolates one sandboxed execution from the machine and from the others.

Its resource limits (`Limits`), the child's setup before exec (`child_setup`: the rlimits, then
the namespaces, the view and the uid drop of `trainer.tasks.sandbox_view`), an exclusive
sandbox uid per concurrent execution under root (`UidLease`, flock across processes), and
killing every process an execution left (`kill_all`). `trainer.tasks.sandbox` runs programs with
these; `trainer.tasks.sandbox_mechanisms` says what holds under each mechanism.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import resource
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainer.tasks.sandbox_view import enter

UID_BASE = 0x5AFE0000  # reserved uids for sandboxed executions (no passwd entries needed)
UID_COUNT = 64


@dataclass(frozen=True)
class Limits:
    """Resource limits of one execution."""

    timeout_s: float = 10.0  # wall clock
    cpu_s: int = 10  # RLIMIT_CPU
    memory_mb: int = 2048  # RLIMIT_AS
    file_size_mb: int = 16  # RLIMIT_FSIZE (also bounds captured stdout/stderr)
    nproc: int = 32  # RLIMIT_NPROC (processes of the sandbox uid)
    nofile: int = 128  # RLIMIT_NOFILE
    tmpfs_mb: int = 64  # size of the working-directory tmpfs
    output_bytes: int = 1 << 20  # stdout/stderr kept in memory


def _proc_stat(pid: str) -> tuple[str, int, int, int] | None:
    """(state, pgrp, session, real uid) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("utf-8", "replace")
        fields = stat[stat.rindex(")") + 2 :].split()
        uid = os.stat(f"/proc/{pid}").st_uid
        return fields[0], int(fields[2]), int(fields[3]), uid
    except (OSError, ValueError, IndexError):
        return None


def leftover_processes(session: int | None = None, uid: int | None = None) -> list[int]:
    """Live (non-zombie) processes owned by `uid` or in `session` (session or group id). Both count: a
    process the sandbox forked keeps the root uid until it drops to the sandbox's, and a program that
    left the session keeps the uid."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = _proc_stat(name)
        if st is None or st[0] in ("Z", "X"):
            continue
        if (uid is not None and st[3] == uid) or (session is not None and session in (st[1], st[2])):
            found.append(int(name))
    return found


def kill_all(session: int | None = None, uid: int | None = None, timeout_s: float = 5.0) -> bool:
    """SIGKILL the process group `session`, then every process of `uid` (when given, else of the
    session) until none is left; True when none is. A killed process lives on until its exit completes
    (a pid namespace's init reaps its whole namespace first), which on a loaded machine takes far longer
    than a few rounds: the bound is time, the pause between rounds growing from 2 to 50 ms."""
    me, deadline, pause = os.getpid(), time.monotonic() + timeout_s, 0.002
    while True:
        if session is not None:
            with contextlib.suppress(OSError):
                os.killpg(session, signal.SIGKILL)
        pids = [p for p in leftover_processes(session, uid) if p != me]
        if not pids:
            return True
        if time.monotonic() > deadline:
            return False
        for p in pids:
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGKILL)
        time.sleep(pause)
        pause = min(0.05, pause * 1.5)


class UidLease:
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


def _count_own_processes() -> int:
    """How many processes (any state) this process's real uid has."""
    uid = os.getuid()
    n = 0
    for name in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            n += name.isdigit() and os.stat(f"/proc/{name}").st_uid == uid
    return n


def _rlimits(lim: Limits, uid: int | None) -> list[tuple[int, int, int]]:
    """(resource, soft, hard) for the child; without a uid drop, clamped to our hard limits."""
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
    return rlimits


def child_setup(lim: Limits, uid: int | None, view: dict[str, Any] | None) -> Callable[[], None]:
    """The function run in the child before exec: the resource limits, then the namespaces and
    the view (`view`: `sandbox_view.enter`'s spec; None: bubblewrap builds them, or unisolated).
    `uid`: the sandbox uid the view drops to, under root; None: the job's own uid, whose process
    count RLIMIT_NPROC starts from. The limits come first, so they bound the namespaces' processes."""
    rlimits = _rlimits(lim, uid)

    def preexec() -> None:
        for res, soft, hard in rlimits:
            resource.setrlimit(res, (soft, hard))
        if view is not None:
            enter(view)

    return preexec
