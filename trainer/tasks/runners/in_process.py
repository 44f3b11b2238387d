"""In-process runner: prelude, candidate and assert tests in one process (no entry points named).

Run by the sandbox as `python -I -S -c <this file's text> SECRET_FD`. It reads a pickled
{"token", "prelude", "code", "tests"} from the pipe SECRET_FD to EOF and closes it before
running anything, then runs prelude, candidate and tests in one namespace (restoring builtins
before the tests), and prints the token only when the tests ran to the end. Early exits,
printed fake successes and a redefined `check` score 0; code that inspects this runner's
frames could find the token: tests that name entry points use the split runner instead.

Standard library only, and nothing from the trainer: it runs under `-I -S`.
"""

import os
import sys


def _main():
    fd = int(sys.argv[1])
    parts = []
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            break
        parts.append(b)
    os.close(fd)
    import builtins
    import pickle

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
            msg = f"{stage}: {type(e).__name__}: {e}"
        except BaseException:
            msg = f"{stage}: exception"
        write(2, ("\n" + msg[-2000:]).encode("utf-8", "replace"))
        exit_(1)
    write(1, b"\n" + tok + b"\n")
    exit_(0)


if __name__ == "__main__":
    _main()
