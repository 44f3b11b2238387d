"""What a run says about itself as it trains: work/progress.json (how far it is, for `python -m trainer status`),
the log line of each finished step, and done.json (written last, when it ends)."""

from __future__ import annotations

import os
import socket
import time
from typing import Any

STOPPED_EARLY_KEYS = ("step", "role", "detector", "value", "threshold")


def progress_record(run: str, step: int, max_steps: int, phase: str, timings: dict[str, float]) -> dict[str, Any]:
    """work/progress.json's content: the step, the phase (started, training, stopped, done), this process and the
    longest update and checkpoint seen (what a signal must wait for)."""
    return {
        "run": run,
        "step": step,
        "max_steps": max_steps,
        "phase": phase,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        **{k: round(v, 3) for k, v in timings.items()},
        "updated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def done_record(
    run: str,
    steps_done: int,
    steps_expected: int,
    config_hash: str | None,
    wall_time_s: float,
    stopped_early: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """done.json's content (the peak is added once published); a run ended by an early warning
    (training.on_warning: stop) names it in `stopped_early`."""
    done = {
        "run": run,
        "steps_done": steps_done,
        "steps_expected": steps_expected,
        "config_hash": config_hash,
        "wall_time_s": wall_time_s,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if stopped_early:
        done["stopped_early"] = {
            **{k: stopped_early[k] for k in STOPPED_EARLY_KEYS},
            "step": int(stopped_early["step"]),
            "value": float(stopped_early["value"]),
            "threshold": float(stopped_early["threshold"]),
        }
    return done


def step_line(
    step: int, max_steps: int, rewards: dict[str, float], evals: list[dict[str, Any]], speed: dict[str, float]
) -> str:
    """The log line of a finished step: each role's mean reward, the last eval of each split, tokens a second and
    generate chunks of the step, seconds elapsed and left (`speed`: tok_s, chunks, elapsed_s, left_s)."""
    reward = " ".join(f"{role}={value:.2f}" for role, value in rewards.items())
    return (
        f"step {step}/{max_steps} reward {reward} | eval {eval_summary(evals)} | "
        f"{speed['tok_s']:.0f} tok/s, {speed['chunks']} generate chunks | "
        f"{speed['elapsed_s']:.0f}s elapsed, {speed['left_s']:.0f}s left"
    )


def eval_summary(evals: list[dict[str, Any]]) -> str:
    """`split=accuracy@step` of each eval row given (the last of each split)."""
    return " ".join(f"{r['split']}={r['accuracy']:.3f}@{r['step']}" for r in evals)
