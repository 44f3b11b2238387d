"""Synthetic sweeps with planted gains over the base model (claims 1 and 2 of analysis/claims.py), or none.

    python -m tests.planted_gains OUT_DIR [--null] [--seeds 5]

`gain_sweep(out, PLANTED)` writes, through tests/synthetic_logs.py's writer, every run of workflow (the three
multi-agent ones) x task (math, code) x scale (0.6B, 1.7B) x policy x seed, and the single-agent baselines. A run's
eval curve is its task and scale's base accuracy at step 0, rising to base + gain by step RISE and flat after; the
gain is its cell's planted gain plus the run's own deviation (sd `seed_sd`), and every eval, step 0 included, adds
its own noise (sd `eval_sd`). Planted: the gain is set by workflow x task (and a little by scale), the policy adds
almost nothing, and the single agent gains less. `NULL` plants no gain at all, with the same noise.

`planted_mean_gain` and `planted_shares` give what the claim tables should recover for the terminal gain.
`gain_summary` draws the per-run summary of such a sweep directly (no run directories, the terminal gain only, as
the peak's maximum over evals is not modelled): thousands of sweeps for benchmarks/bench_claim_coverage.py.
"""

from __future__ import annotations

import argparse
import itertools
import json
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.summary import add_single_baseline
from tests.synthetic_logs import write_synthetic_run

WORKFLOWS, TASKS, SCALES, POLICIES = (
    ("eval_opt", "voting", "orch_workers"),
    ("math", "code"),
    ("qwen3-0.6b", "qwen3-1.7b"),
    ("shared", "isolated"),
)
BASE = {"math": 0.30, "code": 0.20}
BASE_PER_SCALE = 0.1
STEPS, EVAL_EVERY, RISE, TERMINAL_K = 40, 5, 10, 3


@dataclass(frozen=True)
class Gains:
    """What a gain sweep plants: a run's gain over its step-0 eval by construction."""

    by_workflow_task: dict[tuple[str, str], float]
    scale: dict[str, float]  # added to every workflow's gain, the single agent's too
    isolated: float  # added under Isolated-Policy
    single: dict[str, float]  # the single agent's gain, by task
    seed_sd: float = 0.01
    eval_sd: float = 0.01


PLANTED = Gains(
    by_workflow_task={
        ("eval_opt", "math"): 0.07,
        ("eval_opt", "code"): 0.05,
        ("voting", "math"): 0.12,
        ("voting", "code"): 0.05,
        ("orch_workers", "math"): 0.05,
        ("orch_workers", "code"): 0.10,
    },
    scale={"qwen3-0.6b": 0.0, "qwen3-1.7b": 0.02},
    isolated=0.005,
    single={"math": 0.03, "code": 0.02},
)
NULL = Gains(
    by_workflow_task={k: 0.0 for k in PLANTED.by_workflow_task},
    scale=dict.fromkeys(SCALES, 0.0),
    isolated=0.0,
    single=dict.fromkeys(TASKS, 0.0),
)


def cell_gain(g: Gains, workflow: str, task: str, scale: str, policy: str) -> float:
    """The planted mean gain of a cell."""
    if workflow == "single":
        return g.single[task] + g.scale[scale]
    return g.by_workflow_task[(workflow, task)] + g.scale[scale] + (g.isolated if policy == "isolated" else 0.0)


def multi_agent_cells() -> list[tuple[str, str, str, str]]:
    """Every multi-agent cell (workflow, task, scale, policy) of the sweep."""
    return list(itertools.product(WORKFLOWS, TASKS, SCALES, POLICIES))


def planted_mean_gain(g: Gains, vs_single: bool = False) -> float:
    """The mean over the multi-agent cells of the planted gain (over the base, or over the single agent)."""
    return float(
        np.mean(
            [
                cell_gain(g, *c) - (cell_gain(g, "single", c[1], c[2], "shared") if vs_single else 0.0)
                for c in multi_agent_cells()
            ]
        )
    )


def planted_shares(g: Gains) -> dict[str, float]:
    """The population shares of a run's terminal gain variance (what omega squared estimates): the setting part
    (workflow x task and scale), the policy part, and the seed and eval noise (base and terminal evals)."""
    cells = multi_agent_cells()
    setting = [g.by_workflow_task[(w, t)] + g.scale[s] for w, t, s, _ in cells]
    policy = [g.isolated if p == "isolated" else 0.0 for *_, p in cells]
    noise = g.seed_sd**2 + g.eval_sd**2 * (1 + 1 / TERMINAL_K)
    total = float(np.var(setting) + np.var(policy) + noise)
    return {"setting": float(np.var(setting)) / total, "policy": float(np.var(policy)) / total}


def _run(out: Path, g: Gains, workflow: str, task: str, scale: str, policy: str, seed: int, rng_seed: int) -> Path:
    run = f"{workflow}-{task}-{scale}-{policy}-s{seed}"
    rng = np.random.default_rng([rng_seed, zlib.crc32(run.encode())])  # a run's noise is its own, in any order
    gain = cell_gain(g, workflow, task, scale, policy) + rng.normal(0, g.seed_sd)
    base = BASE[task] + BASE_PER_SCALE * SCALES.index(scale)
    noise = {x: rng.normal(0, g.eval_sd) for x in range(0, STEPS + 1, EVAL_EVERY)}
    write_synthetic_run(
        out / run,
        run,
        steps=STEPS,
        eval_every=EVAL_EVERY,
        accuracy=lambda x: base + gain * min(x / RISE, 1.0) + noise.get(int(x), 0.0),  # train rewards: no noise
        seed=int(rng.integers(2**31)),
    )
    return out / run


def gain_sweep(out: str | Path, g: Gains, seeds: int = 5, rng_seed: int = 0) -> list[Path]:
    """Every run of the sweep under `out` (multi-agent cells, then the single-agent baselines); their directories."""
    out = Path(out)
    singles = [("single", t, s, "shared") for t, s in itertools.product(TASKS, SCALES)]
    return [_run(out, g, *cell, seed, rng_seed) for cell in multi_agent_cells() + singles for seed in range(seeds)]


def gain_summary(g: Gains, seeds: int, rng: np.random.Generator) -> pd.DataFrame:
    """The per-run summary (primary split) of a gain sweep drawn directly: base and terminal accuracy with the
    sweep's noise (a step-0 eval; the mean of TERMINAL_K evals), gain_peak set to gain_terminal."""
    singles = [("single", t, s, "shared") for t, s in itertools.product(TASKS, SCALES)]
    rows = []
    for (workflow, task, scale, policy), seed in itertools.product(multi_agent_cells() + singles, range(seeds)):
        true_base = BASE[task] + BASE_PER_SCALE * SCALES.index(scale)
        gain = cell_gain(g, workflow, task, scale, policy) + rng.normal(0, g.seed_sd)
        base = true_base + rng.normal(0, g.eval_sd)
        terminal = true_base + gain + rng.normal(0, g.eval_sd / TERMINAL_K**0.5)
        cell = {"workflow": workflow, "task": task, "scale": scale, "policy": policy, "seed": seed, "variant": ""}
        rows.append({"run": "-".join(map(str, cell.values())), **cell, "split": "main", "primary": True,
                     "base_acc": base, "peak_acc": terminal, "terminal_acc": terminal})  # fmt: skip
    summary = pd.DataFrame(rows)
    summary["gain_terminal"] = summary["terminal_acc"] - summary["base_acc"]
    summary["gain_peak"] = summary["gain_terminal"]
    return add_single_baseline(summary)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--null", action="store_true", help="plant no gain")
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    dirs = gain_sweep(args.out_dir, NULL if args.null else PLANTED, args.seeds)
    print(json.dumps({"runs": len(dirs), "out": args.out_dir}))
