"""Measured step rates, per device: what the cost plan (plan.py) predicts step times from.

One JSON file per device in trainer/sweep/measured_rates/ (`<device slug>.json`, package data kept in the
repository with the CPU or GPU named in it). Its `rates` list holds one entry per (model, backend[, workflow, task]):

    {"model": "tiny" | "Qwen/Qwen3-0.6B", "backend": "hf" | "vllm",
     "generate_tokens_per_s": ..., "update_tokens_per_s": ...,     # the two rates every entry has
     "workflow": "voting", "task": "math",                          # optional: what a run of them does,
     "calls_per_episode": ..., "tokens_per_call": ...,              #   measured by `plan --measure`
     "eval_tokens_per_episode": ..., "eval_tokens_per_s": ..., "startup_s": ..., "checkpoint_s": ...,
     "measured_by": "bench_rollout" | "plan --measure", "measured_at": "2026-12-06T04:00:00"}

The rollout benchmark and the device check write the two rates for a model shape (random weights, forced
token counts); `python -m trainer plan --measure` writes the full entry for each workflow and task of a matrix.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

MEASURED_DIR = Path(__file__).resolve().parent / "measured_rates"
KEY_FIELDS = ("model", "backend", "workflow", "task")


def device_name() -> str:
    """This machine's GPU (the first CUDA device) or else its CPU model name, as /proc/cpuinfo says it."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return cpu_name()


def cpu_name() -> str:
    """The CPU model name (`lscpu`'s Model name), without importing torch."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), platform.processor() or "cpu"
            )
    except OSError:
        return platform.processor() or "cpu"


def slug(device: str) -> str:
    """The measurement file's name for a device: `AMD EPYC` -> `amd-epyc`."""
    return "-".join("".join(c if c.isalnum() else " " for c in device).lower().split())


def record_rate(entry: dict[str, Any], device: str, directory: Path = MEASURED_DIR) -> Path:
    """Add `entry` to the device's file, replacing an entry of the same model, backend, workflow and task."""
    missing = [k for k in ("model", "backend", "generate_tokens_per_s", "update_tokens_per_s") if k not in entry]
    if missing:
        raise ValueError(f"a measured rate needs {missing}")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{slug(device)}.json"
    record = json.loads(path.read_text()) if path.exists() else {"device": device}
    entry = {**entry, "measured_at": entry.get("measured_at") or time.strftime("%Y-%m-%dT%H:%M:%S")}
    key = tuple(entry.get(k) for k in KEY_FIELDS)
    record["rates"] = [r for r in record.get("rates", []) if tuple(r.get(k) for k in KEY_FIELDS) != key] + [entry]
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(path)
    return path


def load_rates(directory: Path = MEASURED_DIR) -> list[dict[str, Any]]:
    """Every measured entry of every device file, each with its file's `device`."""
    out = []
    for path in sorted(Path(directory).glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON ({e}); fix or delete the file") from e
        out += [{**r, "device": record.get("device", path.stem), "file": str(path)} for r in record.get("rates", [])]
    return out


def find_rate(
    rates: list[dict[str, Any]], device: str, model: str, backend: str, workflow: str, task: str
) -> dict[str, Any] | None:
    """The best entry for a run: this device (its name contains `device`, case-insensitive), model and backend,
    of the run's workflow and task where one was measured, else one measured for the model shape alone."""
    found = [
        r for r in rates if device.lower() in r["device"].lower() and r["model"] == model and r["backend"] == backend
    ]
    exact = [r for r in found if r.get("workflow") == workflow and r.get("task") == task]
    shape = [r for r in found if r.get("workflow") is None]
    best = exact or shape
    return max(best, key=lambda r: r.get("measured_at", "")) if best else None
