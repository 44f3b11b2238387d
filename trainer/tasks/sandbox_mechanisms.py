"""Which isolation holds the sandbox's programs on this machine: probed once per job, or refused.

Tried in this order, the first that runs a probe program is kept for the job (and logged):

- `root` (the job runs as root: CI, a container): `sandbox_view` enters new mount, network,
  pid, IPC and UTS namespaces and builds a read-only view of the system and interpreter
  directories, a private tmpfs, and the program runs as a sandbox uid of its own (`UidLease`).
- `bwrap` (bubblewrap installed; no root needed): the same view and namespaces built by
  bubblewrap, with a user namespace that keeps the job's uid and drops every capability.
- `userns` (unprivileged user namespaces allowed; no root needed): `sandbox_view` in a new user
  namespace mapping only the job's uid, then the same namespaces and view as `root`.

In each, the program sees no file of the job (checkpoints, results, home: none is in the view),
writes only its tmpfs, has no network, and can neither see nor signal a process outside its pid
namespace. Where none of them works the sandbox refuses to start (`SandboxUnavailable`, naming
each mechanism and why it failed) unless the job opted in to `unisolated` (the setting
OPT_OUT, off by default): programs then run as the job's user with limits only, a risk logged once.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

MECHANISMS = ("root", "bwrap", "userns")
UNISOLATED = "unisolated"
OPT_OUT = "launcher.allow_unisolated_sandbox"
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
WHAT_HOLDS = {
    "root": "namespaces, a read-only view and a uid of its own per execution",
    "bwrap": "bubblewrap: user, mount, network and pid namespaces, a read-only view, no capabilities",
    "userns": "an unprivileged user namespace with mount, network and pid namespaces and a read-only view",
    UNISOLATED: "NO isolation: programs run as the job's user",
}
RISK = (
    f"sandbox: running model-written programs WITHOUT isolation ({OPT_OUT}: true): they run as this "
    "job's user and can read and write its files (checkpoints, results, ~/.ssh), signal its processes "
    "and reach the network; only resource limits and timeouts hold"
)

_chosen: dict[tuple, str] = {}
_lock = threading.Lock()


class SandboxUnavailable(RuntimeError):
    """No isolation mechanism works here and the job did not accept running unisolated."""


def interpreter() -> str:
    """The job's own interpreter (the real file behind a venv's link), which every program runs under."""
    return os.path.realpath(sys.executable)


def view_paths(python: str) -> list[str]:
    """Host paths bound read-only into the view: the system directories and the interpreter's."""
    own = {os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix)}
    bin_dir = os.path.dirname(python)
    own.add(os.path.dirname(bin_dir) if os.path.basename(bin_dir) == "bin" else bin_dir)
    paths = list(SYSTEM_DIRS)
    for p in sorted(own - {"/"}):  # never the whole machine, whatever the interpreter's layout
        if not any(p == q or p.startswith(q.rstrip("/") + "/") for q in paths):
            paths.append(p)
    return paths


def bwrap_path() -> str | None:
    """The bubblewrap executable, or None where it is not installed."""
    return shutil.which("bwrap", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/bin", "/usr/local/bin"]))


def bwrap_command(program: list[str], python: str, input_dir: str | None, size_mb: int) -> list[str]:
    """The bubblewrap command that runs `program` in the same view as `sandbox_view` builds."""
    args = [
        bwrap_path() or "bwrap",
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
    ]
    for p in view_paths(python):
        if os.path.islink(p):
            args += ["--symlink", os.readlink(p), p]
        elif os.path.exists(p):
            args += ["--ro-bind", p, p]
    # /dev/shm: a small tmpfs of its own (bubblewrap binds host paths only, not its /tmp)
    args += [
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--size",
        str(size_mb << 20),
        "--tmpfs",
        "/tmp",
        "--size",
        str(1 << 20),
        "--tmpfs",
        "/dev/shm",
        "--remount-ro",
        "/dev",
        "--symlink",
        "/tmp",
        "/var/tmp",
    ]
    if input_dir:
        args += ["--ro-bind", input_dir, "/input"]
    return args + ["--remount-ro", "/", "--chdir", "/tmp", "--"] + program


def view_spec(
    mechanism: str, python: str, newroot: str, input_dir: str | None, size_mb: int, uid: int | None
) -> dict[str, Any] | None:
    """`sandbox_view.enter`'s spec for root and userns; None for bwrap (which builds the view) and unisolated."""
    if mechanism not in ("root", "userns"):
        return None
    opts = f"size={size_mb}m,mode=0700" + (f",uid={uid},gid={uid}" if uid is not None else "")
    return {
        "user": mechanism == "userns",
        "uid": uid if mechanism == "root" else None,
        "root": newroot,
        "ro": view_paths(python),
        "input": input_dir,
        "tmpfs": opts,
    }


def choose(probe: Callable[[str], str | None], root: bool, python: str, allow_unisolated: bool) -> str:
    """The mechanism of this job (probed once per process and interpreter): the first whose probe
    passes (`probe` returns None, else why it failed); SandboxUnavailable when none does and the job
    did not opt in; with the opt-in, `unisolated`, its risk logged once."""
    key = (root, python, allow_unisolated)
    with _lock:
        if key in _chosen:
            return _chosen[key]
        failures = []
        for mechanism in MECHANISMS:
            if mechanism == "root" and not root:
                why = "the job does not run as root"
            elif mechanism != "root" and root:
                why = "not tried as root (root isolates with a uid of its own)"
            elif mechanism == "bwrap" and bwrap_path() is None:
                why = "bubblewrap is not installed (no `bwrap` on PATH)"
            else:
                why = probe(mechanism)
            if why is None:
                log.info("sandbox: isolation by %s (%s)", mechanism, WHAT_HOLDS[mechanism])
                _chosen[key] = mechanism
                return mechanism
            failures.append(f"{mechanism}: {why}")
        if not allow_unisolated:
            raise SandboxUnavailable(
                "sandbox: no isolation mechanism works here, so model-written programs are not run. Tried "
                + "; ".join(failures)
                + ". Run the job as root, install bubblewrap, or allow unprivileged user "
                f"namespaces (sysctl user.max_user_namespaces > 0; kernel.unprivileged_userns_clone=1 on some "
                f"kernels); or set {OPT_OUT}: true to run them unisolated, as the job's user (a risk: they can "
                "read and write its files, signal its processes and reach the network)"
            )
        log.warning("%s (no mechanism works: %s)", RISK, "; ".join(failures))
        _chosen[key] = UNISOLATED
        return UNISOLATED


def forget() -> None:
    """Drop the probed mechanisms (tests that fake the machine)."""
    with _lock:
        _chosen.clear()
