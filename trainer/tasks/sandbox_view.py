"""The namespaces and the file-system view a sandboxed program runs in (mechanisms root and userns).

`enter(spec)` runs in the sandbox's child between fork and exec (its preexec function, after the
rlimits), before any untrusted code. `spec` (see `sandbox_mechanisms.view_spec`):

  {"user": True when not root: a new user namespace mapping only this uid and gid,
   "uid": root only: the sandbox uid (and gid) the program runs as, after the mounts,
   "root": an empty host directory the new root is built on,
   "ro": host paths bound read-only at the same path (symlinks recreated),
   "input": a host directory bound read-only at /input, or None,
   "tmpfs": the mount options of the program's writable tmpfs}

The child leaves the network, IPC, UTS, mount and pid namespaces of the machine (and the user
namespace without root) and forks; the new process, pid 1 of the new pid namespace, builds the
view: a tmpfs root holding read-only binds of the system and interpreter directories, /dev's
harmless nodes, a /proc of the new pid namespace, and one writable tmpfs at /tmp (also at
/var/tmp and /dev/shm), the working directory. It pivots into it and returns, to exec the
program. Every process of the program is in that pid namespace: it can neither see nor signal
the trainer, and when pid 1 dies the kernel kills the rest. The forking child waits and exits as
pid 1 did; it dies with the sandbox's kill, and pid 1 then gets SIGKILL (PR_SET_PDEATHSIG), so
nothing outlives it. It closes its copy of every descriptor first, so that the subprocess
module learns of the exec (or its failure) from pid 1 alone.

Without root the program keeps the job's uid inside its user namespace but no capability there
(exec by a non-root uid drops them), so it cannot undo the read-only binds. A failed step
writes its reason to stderr and exits 126, which the probe reports.
"""

from __future__ import annotations

import ctypes
import os
import signal
from typing import Any

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
MNT_DETACH, PR_SET_PDEATHSIG = 2, 1
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217}
SYS_MOUNT_SETATTR = 442  # the same on every architecture
AT_FDCWD, AT_RECURSIVE, ATTR_RO = -100, 0x8000, 0x1 | 0x2 | 0x4  # MOUNT_ATTR_RDONLY|NOSUID|NODEV
DEVICES = ("null", "zero", "full", "random", "urandom")

libc = ctypes.CDLL(None, use_errno=True)  # loaded at import: enter() runs between fork and exec
libc.syscall.restype = ctypes.c_long


def _check(ret: int, what: str) -> None:
    if ret != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), "mount " + target)


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _readonly(target: str) -> None:
    """Make the bind at `target` and every mount below it read-only, nosuid, nodev."""
    attr = (ctypes.c_uint64 * 4)(ATTR_RO, 0, 0, 0)
    ret = libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, target.encode(), AT_RECURSIVE, attr, 32)
    if ret == 0:
        return
    if ctypes.get_errno() != 38:  # ENOSYS: a kernel before 5.12 remounts mount by mount below
        _check(ret, "mount_setattr " + target)
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for point in points:
        if point == target or point.startswith(target + "/"):
            # a remount must keep the flags the mount already has (the kernel locks them)
            keep = os.statvfs(point).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC | 0x400 | 0x800 | 0x1000)
            _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | keep)


def _bind(path: str, new: str, readonly: bool = True) -> None:
    """Bind the host `path` at the same path under `new` (a symlink is recreated, not followed)."""
    dst = new + path
    os.makedirs(os.path.dirname(dst), 0o755, exist_ok=True)
    if os.path.islink(path):
        os.symlink(os.readlink(path), dst)
        return
    if os.path.isdir(path):
        os.makedirs(dst, 0o755, exist_ok=True)
    else:
        open(dst, "a").close()
    _mount(path, dst, None, MS_BIND | MS_REC)
    if readonly:
        _readonly(dst)


def _view(spec: dict[str, Any]) -> None:
    """Build the new root and pivot into it; the working directory is /tmp."""
    new = spec["root"]
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for path in spec["ro"]:
        if os.path.lexists(path):
            _bind(path, new)
    for name in DEVICES:
        _bind("/dev/" + name, new, readonly=False)
    os.makedirs(new + "/proc", 0o555)
    try:
        _mount("proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError as e:  # a container masking parts of /proc forbids a new one: run without /proc
        os.write(2, (f"sandbox: no /proc inside ({e})\n").encode())
    os.makedirs(new + "/tmp", 0o755)
    _mount("tmpfs", new + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, spec["tmpfs"])
    for shadow in ("/var/tmp", "/dev/shm"):
        os.makedirs(new + shadow, 0o755, exist_ok=True)
        _mount(new + "/tmp", new + shadow, None, MS_BIND)
    if spec["input"]:
        os.makedirs(new + "/input", 0o755)
        _mount(spec["input"], new + "/input", None, MS_BIND)
        _readonly(new + "/input")
    os.chdir(new)
    _check(libc.syscall(SYS_PIVOT_ROOT[os.uname().machine], b".", b"."), "pivot_root")
    _check(libc.umount2(b".", MNT_DETACH), "umount the old root")
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir("/tmp")


def _wait(pid: int) -> None:
    """The forking child: hold nothing, wait for pid 1 of the namespace, and end as it ended."""
    os.closerange(3, 4096)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status))


def enter(spec: dict[str, Any]) -> None:
    """Enter the namespaces and the view (see the module docstring); returns in pid 1, ready to exec."""
    os.umask(0o022)
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNET
    try:
        _check(libc.unshare(flags | (CLONE_NEWUSER if spec["user"] else 0)), "unshare")
        if spec["user"]:
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
            _write("/proc/self/gid_map", f"{gid} {gid} 1\n")
        pid = os.fork()
        if pid:
            _wait(pid)
        _check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
        _view(spec)
        if spec["uid"] is not None:
            os.setgroups([])
            os.setgid(spec["uid"])
            os.setuid(spec["uid"])
    except OSError as e:
        os.write(2, (f"sandbox isolation failed: {e}\n").encode("utf-8", "replace"))
        os._exit(126)
