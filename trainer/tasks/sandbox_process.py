"""One sandboxed process's plumbing: its input files, its start in a session of its own, the bytes fed
through its pipes, the wait for its exit and its captured output (trainer/tasks/sandbox.py runs it)."""

from __future__ import annotations

import os
import select
import subprocess
import tempfile
import threading
from collections.abc import Callable
from typing import IO


def write_files(rundir: str, files: dict[str, str], unisolated: bool) -> tuple[str | None, dict[str, str]]:
    """Write each file read-only into `rundir`/input; (that directory or None, {name: path as the
    program sees it})."""
    if not files:
        return None, {}
    input_dir = os.path.join(rundir, "input")
    os.mkdir(input_dir, 0o755)
    paths = {}
    for name, text in files.items():
        path = os.path.join(input_dir, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(path, 0o644)
        paths[name] = path if unisolated else f"/input/{name}"
    return input_dir, paths


def open_pipes(
    pipes: dict[str, bytes], subst: dict[str, str], readers: list[int], writers: list[tuple[int, bytes]]
) -> None:
    """One pipe per named payload: its read end added to `readers` (its number into `subst` under its
    name), its write end and payload to `writers`; the caller closes what it opened, even on an error."""
    for name, data in pipes.items():
        r, w = os.pipe()
        readers.append(r)
        writers.append((w, data))
        subst[name] = str(r)


def stdin_file(rundir: str, stdin: bytes | None) -> IO[bytes] | None:
    """`stdin` in a temporary file in `rundir`, rewound (None: the program's stdin is empty)."""
    if stdin is None:
        return None
    inp = tempfile.TemporaryFile(dir=rundir)
    inp.write(stdin)
    inp.seek(0)
    return inp


def start(
    argv: list[str],
    cwd: str,
    env: dict[str, str],
    setup: Callable[[], None],
    inp: IO[bytes] | None,
    out: IO[bytes],
    err: IO[bytes],
    readers: list[int],
) -> subprocess.Popen:
    """Start the program in its own session; closes stdin's file and the pipes' read ends."""
    try:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=inp if inp is not None else subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            pass_fds=tuple(readers),
            close_fds=True,
            start_new_session=True,
            preexec_fn=setup,
        )
    finally:
        if inp is not None:
            inp.close()
        for r in readers:
            os.close(r)
        readers.clear()


def feed(wfd: int, payload: bytes) -> None:
    """Write the payload into the pipe (in a thread when it exceeds the pipe buffer) and close it."""

    def write() -> None:
        try:
            view = memoryview(payload)
            while view:
                n = os.write(wfd, view)
                view = view[n:]
        except OSError:
            pass  # the program closed its end (exited early): what it did not read is not needed
        finally:
            os.close(wfd)

    if len(payload) <= 60000:
        write()
    else:
        threading.Thread(target=write, daemon=True).start()


def wait_exit(proc: subprocess.Popen, timeout_s: float) -> bool:
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


def read_capped(f: IO[bytes], cap: int) -> str:
    """The captured output, cut to `cap` bytes (head and tail kept); closes the file."""
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
