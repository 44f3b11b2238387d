"""`python -m trainer plan --measure`: two training steps of one run per workflow and task of a matrix, timed
on this machine and recorded as measured rates (trainer/sweep/measured.py) for the cost plan.

Each measured run is the matrix's own run config (its shared-policy run, else its first), trained from the
scale's base model (results/models/<scale>/model.json, which must exist) in a temporary directory: the
start-up (imports and model load), each step's rollout and update, one eval on up to EVAL_PROBLEMS
problems per split and one checkpoint. Nothing of the sweep's results is touched.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from trainer.contract.config import ConfigError
from trainer.sweep.config import expand_matrix, resolve_run_config
from trainer.sweep.measured import MEASURED_DIR, device_name, record_rate

EVAL_PROBLEMS = 32  # per split: enough episodes for an eval rate, a fraction of an eval's cost


def import_seconds() -> float:
    """A job's Python start-up: importing the trainer in a fresh interpreter."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import trainer.rl.train"], check=True)
    return time.perf_counter() - t0


def runs_to_measure(config: dict[str, Any], matrix: str | None) -> list[Any]:
    """One run per (scale, workflow, task) of the matrix: its shared-policy run where there is one."""
    chosen: dict[tuple[str, str, str], Any] = {}
    for run in expand_matrix(config, matrix):
        key = (run.scale, run.workflow, run.task)
        if key not in chosen or (run.policy == "shared" and chosen[key].policy != "shared"):
            chosen[key] = run
    return list(chosen.values())


def measure_run(cfg: dict[str, Any], steps: int, startup_extra_s: float) -> dict[str, Any]:
    """Rates, calls and lengths of `steps` training steps of a resolved run config (config.json's dict)."""
    from trainer.rl.train import Trainer

    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        trainer = Trainer(cfg, d, log=lambda msg: None)
        startup_s = time.perf_counter() - t0 + startup_extra_s
        rollout_s = [0.0]
        rollout = trainer.rollout

        def timed_rollout(step: int):
            t = time.perf_counter()
            out = rollout(step)
            rollout_s[0] += time.perf_counter() - t
            return out

        trainer.rollout = timed_rollout  # the real step, its rollout timed apart from its update
        t_steps = time.perf_counter()
        for step in range(1, steps + 1):
            trainer.train_step(step)
        steps_s = time.perf_counter() - t_steps
        calls = sum(r["n_turns"] for r in trainer.train_rows)
        tokens = sum(r["n_tokens"] for r in trainer.train_rows)
        trainer.eval_splits = {k: v[:EVAL_PROBLEMS] for k, v in trainer.eval_splits.items()}
        tokens0, t = trainer.eval_generate.generated_tokens, time.perf_counter()
        trainer.evaluate(steps)
        eval_s, eval_tokens = time.perf_counter() - t, trainer.eval_generate.generated_tokens - tokens0
        t = time.perf_counter()
        trainer.checkpoint(steps)
        checkpoint_s = time.perf_counter() - t
    episodes = steps * trainer.t.prompts_per_step * trainer.t.num_generations
    return {
        "generate_tokens_per_s": tokens / rollout_s[0],
        "update_tokens_per_s": tokens / (steps_s - rollout_s[0]),
        "calls_per_episode": calls / episodes,
        "tokens_per_call": tokens / calls,
        # an eval runs each problem eval_samples times: tokens per episode, not per problem
        "eval_tokens_per_episode": eval_tokens
        / (trainer.t.eval_samples * sum(len(v) for v in trainer.eval_splits.values())),
        "eval_tokens_per_s": eval_tokens / eval_s,
        "startup_s": startup_s,
        "checkpoint_s": checkpoint_s,
        "step_s": steps_s / steps,
    }


def measure(
    config: dict[str, Any],
    matrix: str | None,
    results: str | Path,
    steps: int = 2,
    directory: Path = MEASURED_DIR,
    out=sys.stdout,
) -> list[Path]:
    """Measure one run per workflow and task of the matrix on this machine; record each; return the files."""
    from trainer.sweep.launch import config_json_content

    runs = runs_to_measure(config, matrix)
    missing = sorted(
        {
            str(Path(results) / "models" / r.scale / "model.json")
            for r in runs
            if not (Path(results) / "models" / r.scale / "model.json").exists()
        }
    )
    if missing:
        raise ConfigError(
            f"plan --measure trains from the base models, and {missing} do not exist: build them "
            f"first with `snakemake {' '.join(missing)}`"
        )
    device, extra, written = device_name(), import_seconds(), []
    for run in runs:
        run_config = resolve_run_config(config, run)
        base = json.loads((Path(results) / "models" / run.scale / "model.json").read_text())
        m = measure_run(config_json_content(run_config, base), steps, extra)
        entry = {
            "model": run_config["model"]["name"],
            "backend": run_config["training"]["generation_backend"],
            "workflow": run.workflow,
            "task": run.task,
            "measured_by": "plan --measure",
            "run": str(run),
            "threads": run_config["resources"].get("cpus", 1),
            **m,
        }
        written.append(record_rate(entry, device, directory))
        print(
            f"measured {run} on {device}: {m['step_s']:.2f} s/step, {m['generate_tokens_per_s']:.0f} generated "
            f"and {m['update_tokens_per_s']:.0f} trained tokens/s, start-up {m['startup_s']:.1f} s",
            file=out,
        )
    return sorted(set(written))
