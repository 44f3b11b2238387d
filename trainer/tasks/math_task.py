"""The math task: the last \\boxed{} answer, verified against the gold answer by math-verify.

math-verify runs in helper processes (math_worker.py), so that a pathological expression is
bounded by a wall-clock timeout (the worker is killed) and scoring is safe from any thread.
Plain integers on both sides take a fast path that agrees with math-verify.
"""

from __future__ import annotations

import json
import os
import queue
import re
import select
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

from trainer.tasks.base import Problem, Score, Task

WORKER_SCRIPT = Path(__file__).with_name("math_worker.py")
MAX_ANSWER_CHARS = 1000
_INT = re.compile(r"-?\d{1,30}")
_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")


def extract_boxed(text: str) -> str | None:
    """The content of the last complete top-level \\boxed{...} (nested braces allowed), or None."""
    if not text:
        return None
    found = None
    pos = 0
    while True:
        m = _BOX.search(text, pos)
        if m is None:
            return found
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth:  # unclosed (e.g. a cut-off completion): keep the last complete one
            return found
        found = text[m.end() : i - 1].strip()
        pos = i


def as_int(text: str) -> int | None:
    """The integer a plain integer answer denotes (e.g. "-12", "007"), else None."""
    s = text.strip()
    return int(s) if _INT.fullmatch(s) else None


class _Worker:
    """One math-verify helper process speaking JSON lines."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-I", str(WORKER_SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        self._buf = b""

    def call(self, request: dict, timeout_s: float) -> dict:
        """Send one request and wait at most timeout_s for its reply; TimeoutError past it."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise RuntimeError(f"math-verify worker exited (code {self.proc.poll()})")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def kill(self) -> None:
        """Stop the process (its stdin closes, and it is killed if it does not exit at once)."""
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.kill()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass


class VerifierPool:
    """A thread-safe pool of math-verify workers, started on demand, restarted after a timeout."""

    def __init__(self, size: int, timeout_s: float = 10.0) -> None:
        self.size = max(1, size)
        self.timeout_s = timeout_s
        self._idle: queue.LifoQueue[_Worker] = queue.LifoQueue()
        self._lock = threading.Lock()
        self._created = 0
        self._all: weakref.WeakSet[_Worker] = weakref.WeakSet()

    def _acquire(self) -> _Worker:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            if self._created < self.size:
                self._created += 1
                try:
                    w = _Worker()
                except BaseException:
                    self._created -= 1
                    raise
                self._all.add(w)
                return w
        return self._idle.get()

    def _discard(self, w: _Worker) -> None:
        w.kill()
        with self._lock:
            self._created -= 1

    def call(self, request: dict) -> dict:
        """Run one request on some worker: its reply, or {"error": ...} on timeout or crash."""
        w = self._acquire()
        try:
            reply = w.call(request, self.timeout_s)
        except TimeoutError:
            self._discard(w)
            return {"parsed": True, "ok": False, "error": f"math-verify timed out after {self.timeout_s:g}s"}
        except (OSError, RuntimeError, ValueError) as e:
            self._discard(w)
            return {"parsed": False, "ok": False, "error": f"math-verify worker failed: {e}"}
        self._idle.put(w)
        return reply

    def close(self) -> None:
        """Stop all workers."""
        for w in list(self._all):
            w.kill()
        with self._lock:
            self._created = 0
        self._idle = queue.LifoQueue()


class MathTask(Task):
    """Math: reward 1 when the last \\boxed{} answer is math-verify equivalent to the gold answer."""

    name = "math"

    def __init__(self, workers: int | None = None, timeout_s: float = 10.0) -> None:
        super().__init__(workers)
        self.pool = VerifierPool(self.workers, timeout_s)
        weakref.finalize(self, self.pool.close)

    def extract_answer(self, text: str) -> str | None:
        """The content of the last \\boxed{...}, or None."""
        return extract_boxed(text)

    def score(self, problem: Problem, completion: str) -> Score:
        """1.0 when the boxed answer equals problem.answer under math-verify, else 0.0 with a reason."""
        return self.score_answer(problem.answer, completion)

    def score_answer(self, gold: str, completion: str) -> Score:
        """Score a completion against a gold answer text."""
        pred = self.extract_answer(completion or "")
        if pred is None:
            return Score(0.0, False, "no \\boxed{} answer")
        if not pred:
            return Score(0.0, False, "empty \\boxed{} answer")
        if len(pred) > MAX_ANSWER_CHARS:
            return Score(0.0, False, f"answer longer than {MAX_ANSWER_CHARS} characters")
        g, p = as_int(gold), as_int(pred)
        if g is not None and p is not None:
            return Score(1.0, True, None) if g == p else Score(0.0, True, "wrong answer")
        reply = self.pool.call({"op": "verify", "gold": str(gold), "pred": pred})
        ok = bool(reply.get("ok"))
        return Score(
            1.0 if ok else 0.0, bool(reply.get("parsed")), None if ok else reply.get("error") or "wrong answer"
        )

    def answers_agree(self, a: str | None, b: str | None) -> bool:
        """Whether two extracted answers are math-verify equivalent (either direction)."""
        if a is None or b is None or not a.strip() or not b.strip():
            return False
        if len(a) > MAX_ANSWER_CHARS or len(b) > MAX_ANSWER_CHARS:
            return a.strip() == b.strip()
        ia, ib = as_int(a), as_int(b)
        if ia is not None and ib is not None:
            return ia == ib
        return bool(self.pool.call({"op": "agree", "a": a, "b": b}).get("ok"))

    def close(self) -> None:
        """Stop the math-verify workers."""
        self.pool.close()
