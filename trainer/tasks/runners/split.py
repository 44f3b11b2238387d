"""Split runner: assert tests in a tester process, the candidate in a forked process of its own.

Run by the sandbox as `python -I -S -c <this file's text> SECRET_FD CODE_FD` when the tests name
the candidate's entry points. It makes itself non-dumpable (so processes of the same uid cannot
read its memory or fds), then forks the candidate process C, which closes SECRET_FD, reads
{"prelude", "code"} from CODE_FD, runs them and serves calls to its entry points over pipes.
The tester T (this process) closes CODE_FD, reads {"token", "prelude", "tests", "entry_points"}
from SECRET_FD, binds each entry point to a proxy that calls into C, runs the tests and prints
the token when all pass. C never holds the token or the tests, and its results reach T only as
plain data (a pickle restricted to builtin containers and scalars), so no candidate code runs
in T.

Standard library only, and nothing from the trainer: it runs under `-I -S`.
"""

import builtins
import ctypes
import io
import os
import pickle
import struct
import sys


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
        data = data[os.write(fd, data) :]


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
            status = f"candidate: {type(e).__name__}: {e}"
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
                raise NameError(f"the program does not define {name}")
            reply = dumps(("ok", fn(*args, **kwargs)), 4)
        except BaseException as e:
            try:
                reply = dumps(("err", f"{type(e).__name__}: {e}"), 4)
            except BaseException:
                reply = dumps(("err", "exception"), 4)
        send(resp_w, reply)


class _Plain(pickle.Unpickler):
    def find_class(self, module, name):
        if module == "builtins" and name in ("set", "frozenset", "complex", "slice", "range"):
            return getattr(builtins, name)
        raise pickle.UnpicklingError(f"the program returned a non-plain value ({module}.{name})")


class CandidateError(Exception):
    pass


def _proxy(name, req_w, resp_r):
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
    ns = {"__name__": "__sandbox__"}
    stage = "prelude"
    try:
        if p["prelude"]:
            exec(compile(p["prelude"], "<prompt>", "exec"), ns)
        for name in p["entry_points"]:
            ns[name] = _proxy(name, req_w, resp_r)
        stage = "tests"
        exec(compile(p["tests"], "<tests>", "exec"), ns)
    except BaseException as e:
        try:
            msg = f"{stage}: {type(e).__name__}: {e}"
        except BaseException:
            msg = f"{stage}: exception"
        os.write(2, ("\n" + msg[-2000:]).encode("utf-8", "replace"))
        os.kill(pid, 9)
        os._exit(1)
    os.write(1, b"\n" + tok + b"\n")
    os.kill(pid, 9)
    os._exit(0)


if __name__ == "__main__":
    _main()
