"""Sandbox executions started from a small helper process instead of the trainer.

Starting a sandboxed program forks the calling process, and a fork copies the caller's page
tables: from the trainer (torch, the model, the heap the allocator keeps) that copy costs more than
the execution itself, from a small process little (docs/benchmarks.md: the code sandbox). So
the code task hands each execution to a helper, `python -m trainer.tasks.sandbox_helper`, which
holds a `Sandbox` and nothing else; concurrent executions (the task's scoring threads) each take
an idle helper or start one, so there are as many helpers as executions ever ran at once. The
sandbox itself, its limits and isolation, is the same code either way.

The isolation mechanism is probed once, here in the caller (`Sandbox.mechanism`: it raises
SandboxUnavailable where none works and the job did not accept running unisolated), and every
helper is told it rather than probing again.

Protocol over the helper's stdin/stdout: length-prefixed pickles, first (Limits, mechanism), then
("run_assert" | "run_stdio", args) in, ("ok", Verdict) or ("error", message) out. The helper exits
at EOF, so it never outlives the trainer.
"""

from __future__ import annotations

import atexit
import os
import pickle
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, BinaryIO

from trainer.tasks.sandbox import Limits, Sandbox, Verdict

_HEADER = struct.Struct("!Q")


def _write(stream: BinaryIO, obj: Any) -> None:
    data = pickle.dumps(obj, 4)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _read(stream: BinaryIO) -> Any:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError("sandbox helper: stream closed")
    (size,) = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("sandbox helper: stream closed mid-message")
    return pickle.loads(data)


class HelperSandbox:
    """`Sandbox.run_assert` and `run_stdio`, each executed by an idle helper process (started on demand)."""

    def __init__(self, limits: Limits | None = None, allow_unisolated: bool = False) -> None:
        self.limits = limits or Limits()
        self.mechanism = Sandbox(self.limits, allow_unisolated=allow_unisolated).mechanism
        self._lock = threading.Lock()
        self._idle: list[subprocess.Popen] = []
        self._all: list[subprocess.Popen] = []
        atexit.register(self.close)

    def _acquire(self) -> subprocess.Popen:
        with self._lock:
            while self._idle:
                proc = self._idle.pop()
                if proc.poll() is None:
                    return proc
        # the helper imports this checkout's trainer package, wherever the caller found it
        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainer.tasks.sandbox_helper"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        _write(proc.stdin, (self.limits, self.mechanism))
        with self._lock:
            self._all.append(proc)
        return proc

    def _call(self, method: str, *args: Any) -> Verdict:
        proc = self._acquire()
        try:
            _write(proc.stdin, (method, args))
            status, value = _read(proc.stdout)
        except (EOFError, OSError) as e:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"sandbox helper (pid {proc.pid}) died: {e}") from e
        with self._lock:
            self._idle.append(proc)
        if status != "ok":
            raise RuntimeError(f"sandbox helper: {value}")
        return value

    def run_assert(self, code: str, tests: str, prelude: str = "", entry_points: list[str] | None = None) -> Verdict:
        """Sandbox.run_assert, in the helper."""
        return self._call("run_assert", code, tests, prelude, entry_points)

    def run_stdio(self, code: str, cases: list[dict], total_timeout_s: float | None = None) -> Verdict:
        """Sandbox.run_stdio, in the helper."""
        return self._call("run_stdio", code, cases, total_timeout_s)

    def close(self) -> None:
        """End every helper (closing its stdin ends it; killed if it does not exit)."""
        with self._lock:
            helpers, self._all, self._idle = self._all, [], []
        for proc in helpers:
            try:
                proc.stdin.close()
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()


def serve(stdin: BinaryIO, stdout: BinaryIO) -> None:
    """The helper's loop: a Sandbox with the limits and mechanism sent first, then one request at a
    time until EOF."""
    limits, mechanism = _read(stdin)
    sandbox = Sandbox(limits, mechanism=mechanism)
    while True:
        try:
            method, args = _read(stdin)
        except EOFError:
            return
        try:
            if method not in ("run_assert", "run_stdio"):
                raise ValueError(f"unknown request {method!r}")
            reply = ("ok", getattr(sandbox, method)(*args))
        except Exception as e:  # noqa: BLE001 - reported to the caller, which raises it
            reply = ("error", f"{type(e).__name__}: {e}")
        _write(stdout, reply)


if __name__ == "__main__":
    replies = os.fdopen(os.dup(1), "wb")  # the protocol's own copy of stdout ...
    os.dup2(2, 1)  # ... so that a stray print cannot corrupt it
    serve(sys.stdin.buffer, replies)
