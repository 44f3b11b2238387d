"""Stopping a run where it is when its job is signalled (SLURM timeout, preemption, requeue).

The job's signal handler sets a `threading.Event`; every generation call (one stage's prompts,
the unit a rollout or eval is made of) first checks it and raises `StopRequested`, so a rollout or
eval in progress is abandoned within one call instead of running to the end of the step. The
training loop catches it and checkpoints the state after its last completed step.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any


class StopRequested(Exception):
    """The job was signalled: the rollout or eval in progress is abandoned."""


def pause_for_tests(point: str, stop: threading.Event | None = None) -> None:
    """TEST HOOK, off unless set: sleep TRAINER_TEST_PAUSE_S seconds at each `point` named in
    TRAINER_TEST_PAUSE_AT (comma list of checkpoint, publish, step, generate), so that a test can
    kill or signal the process inside that window. With `stop`, the sleep ends when it is set (a
    generation call that a signal interrupts)."""
    if point in os.environ.get("TRAINER_TEST_PAUSE_AT", "").split(","):
        seconds = float(os.environ.get("TRAINER_TEST_PAUSE_S", "1"))
        if stop is not None:
            stop.wait(seconds)
        else:
            time.sleep(seconds)


class StoppableGenerator:
    """A generation backend that raises StopRequested before a call once `stop` is set.

    Every other attribute (generated_tokens, ...) is the wrapped backend's.
    """

    def __init__(self, inner: Any):
        self.inner = inner
        self.stop: threading.Event | None = None

    def __call__(self, role: str, prompts: list[str]) -> Any:
        pause_for_tests("generate", self.stop)
        if self.stop is not None and self.stop.is_set():
            raise StopRequested(f"stopped before generating for {role}")
        return self.inner(role, prompts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
