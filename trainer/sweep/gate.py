"""The plan as a gate: runs whose eval chunk cannot fit one job are refused before they are submitted.

A requeued job resumes its eval at the first unfinished chunk (training.eval_chunk_problems problems of a
split; trainer/rl/evaluation.py), and abandons the chunk it was in: a run whose one eval chunk outlasts
its job (`resources.time_min`) never gets past it, whereas a whole eval may span several jobs (the run's
requeues are checked as a whole). How hard the gate is follows how much the prediction is worth:

- REFUSE where even a lower bound does not fit: the device's peak rates (DEVICE_PEAKS), memory bandwidth
  for decoding (every generated token reads the KV cache of the tokens before it, and each decode step of
  a chunk reads the weights once) and FLOP/s for the arithmetic and the update. With the HF backend every
  row of a chunk runs every decode step of its longest row, so a row is taken to decode
  max_completion_length tokens (a vLLM row stops at its end: without measured lengths its bound only warns).
- REFUSE where a rate measured for the device (trainer/sweep/measured_rates/) does not fit one eval chunk in one
  job, or the run in its requeues.
- WARN where only the stated estimate (trainer/sweep/cost.py) says so: measure the device.

`check_matrix` runs at DAG build (rules/common.smk: `snakemake --profile slurm` and `-n`); the top-level
setting `allow_unfit_runs: true` submits refused runs anyway (they are still named).
"""

from __future__ import annotations

import sys
from typing import Any

from trainer.contract.config import ConfigError
from trainer.contract.runid import RunId
from trainer.models.size import model_shape, parameter_count
from trainer.rl.processes import world_size_of
from trainer.sweep.config import resolve_matrix, run_cells
from trainer.sweep.cost import (
    ASSUMED_STARTUP_S,
    eval_chunk_episodes,
    eval_count,
    eval_episodes,
    eval_sources,
    predict_run,
    rate_for,
    split_problems,
    training_of,
)
from trainer.sweep.measured import cpu_name, load_rates
from trainer.workflows import workflow_class

# peak dense bf16 FLOP/s, memory bandwidth (bytes/s) and memory (bytes) of one device (the vendors'
# datasheets, SXM parts); `cpu`: a generous bound for a CPU run (two AVX-512 cores, one socket's DRAM)
DEVICE_PEAKS = {
    "H200": {"flops": 989e12, "bandwidth": 4.8e12, "memory": 141e9},
    "H100": {"flops": 989e12, "bandwidth": 3.35e12, "memory": 80e9},
    "A100": {"flops": 312e12, "bandwidth": 2.039e12, "memory": 80e9},
    "L40S": {"flops": 362e12, "bandwidth": 0.864e12, "memory": 48e9},
    "A6000": {"flops": 155e12, "bandwidth": 0.768e12, "memory": 48e9},
    "cpu": {"flops": 1.6e11, "bandwidth": 1e11, "memory": 24e9},
}
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
FIX = (
    "evaluate fewer problems at a time (training.eval_chunk_problems) or in all (training.eval_problems, or "
    "the split's eval_problems), give the job more GPUs "
    "(resources.gpus) or time (resources.time_min), or use the vLLM backend (training.generation_backend: vllm)"
)
MEASURE = (
    "measure it on the device: `python -m trainer plan --measure` there, or the device check "
    "(benchmarks/device_check.sh)"
)
OVERRIDE = "allow_unfit_runs: true submits it anyway"


def device_peaks(device: str) -> dict[str, float] | None:
    """The peak rates of the device whose name contains a DEVICE_PEAKS key (case-insensitive), or None."""
    return next((v for k, v in DEVICE_PEAKS.items() if k.lower() in device.lower()), None)


def generation_bound_s(
    shape: dict[str, Any], dtype_bytes: int, rows: int, tokens: int, peaks: dict[str, float]
) -> float:
    """Least seconds `rows` completions of `tokens` tokens take on one device at its peak rates.

    Memory: token t of a row reads the KV cache of its t tokens before it (prompts left out: a lower bound),
    and each decode step reads the weights once for all rows of a chunk as large as the whole device holds.
    Arithmetic: 2 FLOPs per parameter and token. The larger of the two.
    """
    from trainer.models.memory import kv_bytes_per_token

    params = parameter_count(shape)
    kv = kv_bytes_per_token(shape, dtype_bytes)
    kv_read = kv * tokens * tokens / 2
    chunk_rows = max(1, int(peaks["memory"] // (kv * tokens)))
    weight_read = params * dtype_bytes * tokens / chunk_rows
    memory_s = rows * (kv_read + weight_read) / peaks["bandwidth"]
    return max(memory_s, rows * tokens * 2 * params / peaks["flops"])


def run_bounds(
    run_config: dict[str, Any], scale: dict[str, Any], rate: dict[str, Any] | None, peaks: dict[str, float] | None
) -> dict[str, Any]:
    """One eval's and one step's least seconds at the device's peak (NaN where the shape or device is
    unknown), and whether the eval's bound is firm (its token count is known, see the module docstring)."""
    t = run_config["training"]
    shape = model_shape(scale)
    if shape is None or peaks is None:
        return {"eval_bound_s": float("nan"), "step_bound_s": float("nan"), "bound_firm": False}
    cls = workflow_class(run_config["workflow"], run_config["workflow_params"])
    calls = (rate or {}).get("calls_per_episode") or cls.max_turns(run_config["workflow_params"])
    measured_tokens = (rate or {}).get("tokens_per_call")
    hf = t["generation_backend"] == "hf"
    tokens = t["max_completion_length"] if hf or not measured_tokens else int(measured_tokens)
    dtype_bytes = DTYPE_BYTES.get(scale.get("dtype", "float32"), 4)
    world = world_size_of(run_config["resources"])
    eval_rows = eval_episodes(run_config) * calls
    step_rows = t["prompts_per_step"] * t["num_generations"] * calls
    update_s = step_rows * tokens * 6 * parameter_count(shape) / peaks["flops"]  # forward and backward
    return {
        "eval_bound_s": generation_bound_s(shape, dtype_bytes, eval_rows, tokens, peaks) / world,
        "step_bound_s": (generation_bound_s(shape, dtype_bytes, step_rows, tokens, peaks) + update_s) / world,
        "bound_firm": hf or bool(measured_tokens),
    }


def run_memory_gib(run_config: dict[str, Any], scale: dict[str, Any]) -> float:
    """GiB one process holds at its update: the weights, every policy's trained parameters with their AdamW
    state, and one update micro-batch's peak (trainer/models/memory.py); NaN where the shape is unknown."""
    from trainer.models.memory import run_update_bytes
    from trainer.models.size import checkpoint_bytes, trained_parameters

    shape = model_shape(scale)
    if shape is None:
        return float("nan")
    dtype_bytes = DTYPE_BYTES.get(scale.get("dtype", "float32"), 4) if run_config["resources"].get("gpus") else 4
    t = run_config["training"]
    update = run_update_bytes(t, shape, dtype_bytes, trained_parameters(run_config, shape))
    return (parameter_count(shape) * dtype_bytes + checkpoint_bytes(run_config, shape) + update) / 2**30


def eval_description(run_config: dict[str, Any]) -> str:
    """One eval's splits as the messages name them: `dapo_holdout 1500 (ASSUMED) + aime2025 30 problems x 5`."""
    t = training_of(run_config)
    parts = []
    for i, source in enumerate(eval_sources(run_config)):
        n, assumed = split_problems(source, t)
        parts.append(f"{source.name or f'eval{i}'} {n}{' (ASSUMED)' if assumed else ''}")
    return f"{' + '.join(parts)} problems x {t.eval_samples} samples"


def chunk_share(run_config: dict[str, Any]) -> float:
    """Of one eval's work, its largest chunk's share: what a requeued job cannot resume inside."""
    return eval_chunk_episodes(run_config) / max(1, eval_episodes(run_config))


def verdict(
    run: str,
    predicted: dict[str, float],
    bounds: dict[str, Any],
    source: str,
    run_config: dict[str, Any],
    device: str,
    startup_s: float = ASSUMED_STARTUP_S,
) -> tuple[str, str]:
    """("ok" | "warn" | "refuse", why): see the module docstring. The reason names the run, the eval and the fix."""
    job_s = run_config["resources"]["time_min"] * 60
    episodes, chunk = eval_episodes(run_config), eval_chunk_episodes(run_config)
    share = chunk_share(run_config)
    what = (
        f"run {run}: one eval ({eval_description(run_config)} = {episodes} episodes) in chunks of "
        f"at most {chunk} episodes, one of which"
    )
    limit = f"its job's resources.time_min ({job_s / 3600:.1f} h)"
    if bounds["bound_firm"] and share * bounds["eval_bound_s"] > job_s:
        return "refuse", (
            f"{what} needs at least {share * bounds['eval_bound_s'] / 3600:.1f} h even at {device}'s "
            f"peak rates, over {limit}: {FIX}; {OVERRIDE}"
        )
    if not predicted:
        return "ok", ""
    # an estimate below the lower bound is impossible: the bound stands in for it
    eval_one_s = max(predicted["eval_s"] / max(1, eval_count(training_of(run_config))), bounds["eval_bound_s"])
    measured = source.startswith("measured")
    if measured and startup_s + share * eval_one_s > job_s:
        return "refuse", (
            f"{what} takes {share * eval_one_s / 3600:.1f} h at the rate measured on {device}, over "
            f"{limit}: {FIX}; {OVERRIDE}"
        )
    if measured and not predicted["fits"]:
        return "refuse", (
            f"run {run}: {predicted['run_s'] / 3600:.1f} h at the rate measured on {device} does not "
            f"finish within time_min x (1 + launcher.max_num_timeout) "
            f"({predicted['time_limit_s'] / 3600:.1f} h): {FIX}; {OVERRIDE}"
        )
    if not bounds["bound_firm"] and share * bounds["eval_bound_s"] > job_s:
        return "warn", (
            f"{what} may outlast {limit} (vLLM rows at max_completion_length: "
            f"{share * bounds['eval_bound_s'] / 3600:.1f} h at {device}'s peak); {MEASURE}; or {FIX}"
        )
    if startup_s + share * eval_one_s > job_s:
        return "warn", (
            f"{what} may outlast {limit} ({share * eval_one_s / 3600:.1f} h by the ESTIMATE); {MEASURE}; or {FIX}"
        )
    if not predicted["fits"]:
        return "warn", (
            f"run {run} may not finish within its requeues ({predicted['run_s'] / 3600:.1f} h by the "
            f"ESTIMATE, limit {predicted['time_limit_s'] / 3600:.1f} h); {MEASURE}; or {FIX}"
        )
    return "ok", ""


def assess(
    run: str, run_config: dict[str, Any], scale: dict[str, Any], rates: list[dict[str, Any]], device: str
) -> dict[str, Any]:
    """A run's plan figures (cost.predict_run), its lower bounds, one eval's predicted seconds and the verdict."""
    rate, source = rate_for(run_config, scale, rates, device)
    predicted = predict_run(run_config, rate) if rate else {}
    on = device if run_config["resources"].get("gpus", 0) else "cpu"
    bounds = run_bounds(run_config, scale, rate, device_peaks(on))
    startup_s = (rate or {}).get("startup_s") or ASSUMED_STARTUP_S
    gate, why = verdict(run, predicted, bounds, source, run_config, device, startup_s)
    memory_gib = run_memory_gib(run_config, scale)
    device_gib = (device_peaks(on) or {}).get("memory", float("inf")) / 2**30
    if gate == "ok" and memory_gib > device_gib:
        gate, why = (
            "warn",
            (
                f"run {run}: weights, optimizer state and one update micro-batch "
                f"(trainer/models/memory.py) need {memory_gib:.0f} GiB, over {device}'s "
                f"{device_gib:.0f} GiB: lower training.micro_batch_tokens"
            ),
        )
    evals = max(1, eval_count(training_of(run_config)))
    eval_one_s = predicted.get("eval_s", float("nan")) / evals
    if bounds["eval_bound_s"] > eval_one_s:  # an estimate below the lower bound: the bound stands in for it
        eval_one_s = bounds["eval_bound_s"]
    share = chunk_share(run_config)
    return {
        **predicted,
        "memory_gib": memory_gib,
        "source": source,
        "eval_one_s": eval_one_s,
        "eval_bound_s": bounds["eval_bound_s"],
        "eval_chunk_s": share * eval_one_s,
        "eval_chunk_bound_s": share * bounds["eval_bound_s"],
        "step_bound_s": bounds["step_bound_s"],
        "time_min": run_config["resources"]["time_min"],
        "gate": gate,
        "gate_reason": why,
    }


def check_matrix(
    config: dict[str, Any],
    gpu: str = "H100",
    rates: list[dict[str, Any]] | None = None,
    resolved: dict[RunId, dict[str, Any]] | None = None,
) -> list[str]:
    """Raise ConfigError naming every refused run of the matrix (unless `allow_unfit_runs`); print the
    warnings (and refusals let through) to stderr and return them. `resolved`: resolve_matrix's (default:
    the matrix in use). A cell's runs differ in their seed alone, which no verdict reads: each cell is
    assessed once, and a cell that is not ok once per run, so that each line names its run."""
    rates = load_rates() if rates is None else rates
    refused, warned = [], []
    resolved = resolve_matrix(config) if resolved is None else resolved
    for rc, runs in run_cells(resolved):
        device = gpu if rc["resources"].get("gpus", 0) else cpu_name()
        scale = config["scales"][runs[0].scale]
        rows = [assess(str(runs[0]), rc, scale, rates, device)]
        if rows[0]["gate"] != "ok":
            rows += [assess(str(run), resolved[run], scale, rates, device) for run in runs[1:]]
        for row in rows:
            (refused if row["gate"] == "refuse" else warned if row["gate"] == "warn" else []).append(row["gate_reason"])
    if refused and not config.get("allow_unfit_runs", False):
        raise ConfigError(
            f"{len(refused)} runs cannot fit their jobs (the plan's gate, trainer/sweep/gate.py; "
            f"`python -m trainer plan` shows the whole plan):\n  " + "\n  ".join(refused)
        )
    notes = [f"refused but submitted (allow_unfit_runs: true): {r}" for r in refused] + [
        f"warning: {w}" for w in warned
    ]
    for note in notes:
        print(note, file=sys.stderr)
    return notes
