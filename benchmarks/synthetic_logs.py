"""Synthetic run directories in the trainer's exact format, for analysis tests and benchmarks.

    python benchmarks/synthetic_logs.py OUT_DIR --runs 108 --steps 500
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path

from trainer import schema
from trainer.schema import parse_run_id

ROLES = {"single": ["generator"], "eval_opt": ["generator", "evaluator"], "voting": ["generator", "aggregator"],
         "orch_workers": ["orchestrator", "worker", "synthesizer"]}


def write_synthetic_run(run_dir: Path, run: str, *, steps: int = 30, eval_every: int = 5,
                        accuracy=None, seed: int = 0) -> None:
    """A finished run: config.json, train/eval/samples parquet and done.json, as the trainer writes them.

    `accuracy(step) -> float` gives the eval curve (default: a rise then a plateau).
    """
    rid = parse_run_id(run)
    rng = random.Random(seed)
    accuracy = accuracy or (lambda s: 0.2 + 0.4 * (1 - math.exp(-s / max(steps / 4, 1))))
    roles = ROLES[rid.workflow]
    policy = {r: ("shared" if rid.policy == "shared" else r) for r in roles}
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = {"run": run, **rid.axes(), "training": {"max_steps": steps, "eval_every": eval_every},
           "config_hash": "synthetic"}
    schema.write_json_atomic(cfg, run_dir / schema.CONFIG_JSON)
    train = []
    for step in range(1, steps + 1):
        for i, role in enumerate(roles):
            g = (1 + i) * (1 + rng.random())
            train.append({"step": step, "role": role, "policy": policy[role], "n_turns": 32, "n_tokens": 512,
                          "reward_mean": accuracy(step), "reward_std": 0.4, "adv_abs_mean": 0.8, "loss": 0.0,
                          "grad_norm": g, "grad_sq_share": g * g / sum(((1 + j) * 1.5) ** 2 for j in range(len(roles))),
                          "grad_cos_others": 0.1, "entropy": 1.0, "kl": float("nan"), "clip_ratio": 0.0,
                          "completion_len_mean": 16.0, "lr": 2e-5, "skipped": False, "time_s": 1.0})
    evals = [{"step": s, "split": "main", "accuracy": accuracy(s), "n": 200, "final_answer_parse_rate": 1.0,
              "time_s": 1.0} for s in range(0, steps + 1, eval_every)]
    schema.write_parquet_atomic(schema.to_table(train, schema.TRAIN_SCHEMA), run_dir / schema.TRAIN_PARQUET)
    schema.write_parquet_atomic(schema.to_table(evals, schema.EVAL_SCHEMA), run_dir / schema.EVAL_PARQUET)
    schema.write_parquet_atomic(schema.to_table([], schema.SAMPLES_SCHEMA), run_dir / schema.SAMPLES_PARQUET)
    schema.write_json_atomic({"run": run, "steps_done": steps, "steps_expected": steps, "config_hash": "synthetic",
                              "wall_time_s": 1.0}, run_dir / schema.DONE_JSON)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out_dir")
    parser.add_argument("runs", nargs="+", help="run ids")
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    for i, run in enumerate(args.runs):
        write_synthetic_run(Path(args.out_dir) / run, run, steps=args.steps, seed=i)
    print(json.dumps({"runs": len(args.runs), "out": args.out_dir}))
