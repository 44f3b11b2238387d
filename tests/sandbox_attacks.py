"""The sandbox's attacks, run by a trainer-like process as whatever user it is (a script, not a test).

`python tests/sandbox_attacks.py MECHANISM SCRATCH` plays a training job: it owns a job directory
in SCRATCH (a checkpoint and a private file, like ~/.ssh), a bystander process of its own user and
a listening socket on the host's loopback, scores attack programs through a Sandbox with
MECHANISM (or the probed one: `probe`), checks afterwards what they did to it, and prints one
JSON object: {"mechanism": ..., "results": {attack: [passed, harmless]}, "details": {...}}.
tests/test_sandbox_unprivileged.py runs it as root and as an unprivileged user, under each
mechanism, and expects the same results from every run.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import psutil

from trainer.tasks.sandbox import UID_BASE, UID_COUNT, Limits, Sandbox

TESTS = "assert f(1) == 4\nassert f(2) == 5\n"
GOOD = "def f(x):\n    return x + 3\n"


def _escape_if(what: str, attempt: str) -> str:
    """Program text: try `attempt` (a statement); when it works, exit 0 printing a success marker
    the tests never accept, so an escape scores 0."""
    return f"try:\n    {attempt}\nexcept Exception:\n    pass\nelse:\n    raise SystemExit('escaped: {what}')\n"


def attacks(job: str, port: int, trainer: int, bystander: int, tag: str) -> dict[str, str]:
    """{name: program} (tests/test_sandbox_unprivileged.py's EXPECTED says what each must score)."""
    secret, ckpt = os.path.join(job, "id_rsa"), os.path.join(job, "checkpoint", "model.bin")
    read = "".join(_escape_if(f"read {p}", f"open({p!r}, 'rb').read(1)") for p in (secret, ckpt, "/etc/shadow"))
    read += _escape_if("listed the job", f"os.listdir({job!r})")
    write = "".join(
        _escape_if(f"wrote {p}", f"open({p!r}, 'w').write('x')")
        for p in (os.path.join(job, "checkpoint", "evil.bin"), ckpt, os.path.join(job, "evil.txt"))
    )
    write += _escape_if("removed the secret", f"os.remove({secret!r})")
    # writes that land in the program's own tmpfs are fine: the host check sees whether any reached the host
    for p in (f"/tmp/evil-{tag}", f"/var/tmp/evil-{tag}", f"/dev/shm/evil-{tag}"):
        write += f"try:\n    open({p!r}, 'w').write('x')\nexcept OSError:\n    pass\n"
    network = _escape_if("host loopback", f"socket.create_connection(('127.0.0.1', {port}), timeout=1)") + _escape_if(
        "internet", "socket.create_connection(('1.1.1.1', 80), timeout=1)"
    )
    signals = "".join(_escape_if(f"signalled {p}", f"os.kill({p}, signal.SIGKILL)") for p in (trainer, bystander))
    # its own process tree (the tester, -1 within its namespace): the program may fail, nothing else may
    kill_all = (
        "import os, signal\nfor pid in (os.getppid(), -1):\n    try:\n        os.kill(pid, signal.SIGKILL)\n"
        "    except OSError:\n        pass\n"
    )
    fork_bomb = (
        "import os\nwhile True:\n    try:\n        if os.fork() == 0:\n            os.setsid()\n"
        "    except OSError:\n        pass\n"
    )
    memory_bomb = "x = []\nwhile True:\n    x.append(bytearray(1 << 24))\n"
    head = "import os, signal, socket\n"
    return {
        "correct": GOOD,
        "read_outside": head + read + GOOD,
        "write_outside": head + write + GOOD,
        "network": head + network + GOOD,
        "signal_trainer": head + signals + GOOD,
        "kill_everything": kill_all + GOOD,
        "fork_bomb": fork_bomb,
        "memory_bomb": memory_bomb + GOOD,
    }


def own_processes() -> set[int]:
    """Live descendants of this process, and without root every live process of this uid (a
    sandboxed program runs as it): what an execution must not leave behind."""
    found = {c.pid for c in psutil.Process().children(recursive=True) if _alive(c)}
    if os.getuid() != 0:
        found |= {
            p.pid
            for p in psutil.process_iter(["uids"])
            if p.info["uids"] and p.info["uids"].real == os.getuid() and p.pid != os.getpid() and _alive(p)
        }
    return found


def _alive(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def main(mechanism: str, scratch: str) -> dict:
    job = os.path.join(scratch, "job")
    os.makedirs(os.path.join(job, "checkpoint"), exist_ok=True)
    os.chmod(job, 0o700)
    files = {os.path.join(job, "id_rsa"): "private key", os.path.join(job, "checkpoint", "model.bin"): "weights"}
    for path, text in files.items():
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o600)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.setblocking(False)
    bystander = subprocess.Popen(["sleep", "60"])
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    box = Sandbox(
        Limits(timeout_s=3.0, cpu_s=3, memory_mb=256),
        mechanism=None if mechanism == "probe" else mechanism,
        uid_base=UID_BASE + 2 * UID_COUNT,
    )  # root: uids no concurrent test module uses
    before = own_processes()
    results, details = {}, {}
    for name, code in attacks(job, listener.getsockname()[1], os.getpid(), bystander.pid, tag).items():
        verdict = box.run_assert(code, TESTS, entry_points=["f"])
        details[name] = verdict.error
        results[name] = [verdict.passed, _harmless(job, files, listener, bystander, tag, before)]
    stdio = box.run_stdio("print(sum(map(int, input().split())))\n", [{"input": "2 3\n", "output": "5\n"}])
    results["correct_stdio"] = [stdio.passed, True]
    ex = box.execute(["-c", "import sys; print(sys.version_info[:2], sys.flags.isolated, sys.flags.no_site)"])
    details["interpreter"] = ex.stdout.strip()
    bystander.kill()
    bystander.wait()
    return {
        "mechanism": box.mechanism,
        "results": results,
        "details": details,
        "interpreter": f"{tuple(sys.version_info[:2])} 1 1",
    }


def _harmless(
    job: str, files: dict[str, str], listener: socket.socket, bystander: subprocess.Popen, tag: str, before: set[int]
) -> bool:
    """Whether the job is as it was: its files, no new file, no connection, its processes alive, no
    process of the sandbox left."""
    intact = all(os.path.exists(p) and pathlib.Path(p).read_text() == text for p, text in files.items())
    new = sorted(set(os.listdir(job)) - {"id_rsa", "checkpoint"}) + sorted(
        set(os.listdir(os.path.join(job, "checkpoint"))) - {"model.bin"}
    )
    leaked = [p for p in (f"/tmp/evil-{tag}", f"/var/tmp/evil-{tag}", f"/dev/shm/evil-{tag}") if os.path.exists(p)]
    try:
        listener.accept()[0].close()
        connected = True
    except BlockingIOError:
        connected = False
    deadline = time.monotonic() + 2
    while own_processes() - before - {bystander.pid} and time.monotonic() < deadline:
        time.sleep(0.02)
    left = own_processes() - before - {bystander.pid}
    alive = bystander.poll() is None
    return intact and not new and not leaked and not connected and alive and not left


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
