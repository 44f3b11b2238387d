"""Synthetic sweeps with a known effect (or none) for each claim table of analysis/claims.py.

    python -m tests.planted_claims OUT_DIR [--null] [--seeds 8]

`planted_sweep(out, PLANTED)` writes, through tests/synthetic_logs.py's writer, a sweep of Voting and
Orchestrator-Workers runs over variants of 2-6 parallel agents (run id `...-s{seed}-a{K}`) and Evaluator-Optimizer
runs, Shared and Isolated, where:
- claim 3: Isolated falls off a cliff more often (`cliff_p`) and peaks earlier (`peak_step`);
- claim 4: Isolated's terminal evals show each signature's diagnostic at a higher rate (`rates`, binomial over
  the eval's 200 episodes);
- claim 5: the parallel role's amplification index grows with the agents under Isolated only (`amp_slope`), and
  the terminal drop grows with the index (`drop_per_index`);
- claim 6: the Shared policy's dominant role captures it `capture_lead` steps before the cliff.
`NULL` plants none of these: the same distributions for both policies, capture onset centred on the cliff.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from analysis.gradients import CAPTURE_SHARE
from tests.synthetic_logs import GROUP_ROLES, ROLES, write_synthetic_run
from trainer.contract import rundir

STEPS, EVAL_EVERY = 100, 5
POLICIES = ("shared", "isolated")


@dataclass(frozen=True)
class Effects:
    """What a planted sweep plants, per policy (shared, isolated)."""

    cliff_p: tuple[float, float]
    peak_step: tuple[int, int]
    rates: dict[str, tuple[float, float]]  # eval column -> its rate (shared, isolated)
    amp_slope: tuple[float, float]  # amplification index per added agent
    drop_per_index: float  # extra terminal drop per unit of index above 1
    capture_lead: float  # cliff step - capture step, as `capture` measures it
    capture_spread: float = 5.0
    notes: dict[str, Any] = field(default_factory=dict)


PLANTED = Effects(
    cliff_p=(0.15, 0.8),
    peak_step=(50, 35),
    rates={
        "evaluator_accept_rate": (0.5, 0.7),
        "top_slot_share": (0.4, 0.6),
        "vote_agreement": (0.5, 0.65),
        "final_answer_parse_rate": (0.95, 0.85),
    },
    amp_slope=(0.0, 0.3),
    drop_per_index=0.04,
    capture_lead=30.0,
)
NULL = Effects(
    cliff_p=(0.45, 0.45),
    peak_step=(40, 40),
    rates={
        "evaluator_accept_rate": (0.6, 0.6),
        "top_slot_share": (0.5, 0.5),
        "vote_agreement": (0.55, 0.55),
        "final_answer_parse_rate": (0.9, 0.9),
    },
    amp_slope=(0.0, 0.0),
    drop_per_index=0.0,
    capture_lead=0.0,
    capture_spread=15.0,
)

RATE_WORKFLOW = {"evaluator_accept_rate": "eval_opt", "top_slot_share": "voting", "vote_agreement": "voting"}
CELLS = [("voting", k) for k in (2, 4, 6)] + [("orch_workers", k) for k in (2, 4, 6)] + [("eval_opt", 0)]


def _accuracy(peak_step: int, cliff_step: int | None, slow_drop: float, depth: float):
    """A tent: 0.3 rising to 0.6 at peak_step, then a slow decline of `slow_drop` to the end, and a cliff of
    `depth`."""

    def acc(x: float) -> float:
        a = 0.3 + 0.3 * min(x / peak_step, 1.0)
        if x > peak_step:
            a -= slow_drop * (x - peak_step) / (STEPS - peak_step)
        if cliff_step is not None and x >= cliff_step:
            a -= depth
        return float(a)

    return acc


def detector_delay(n_roles: int, share: float = CAPTURE_SHARE, smoothing_steps: int = 10) -> int:
    """Steps after a jump of the dominant share (even -> 0.85) until analysis/gradients.py `capture`'s trailing
    mean reaches `share`: the null plants capture this much before the cliff, so that it is *measured* at it."""
    even = 1 / n_roles
    return math.ceil((share - even) / (0.85 - even) * smoothing_steps) - 1


def _capture_shares(roles: list[str], dominant: str, t_cap: float):
    """grad_sq_share per role: `dominant` jumps from an even share to 0.85 at t_cap, the others share the rest."""
    even = 1 / len(roles)
    dom = lambda x: np.where(x >= t_cap, 0.85, even)  # noqa: E731
    others = [r for r in roles if r != dominant]
    shares = {dominant: dom}
    for r in others:
        shares[r] = lambda x: (1 - dom(x)) / len(others)
    return shares


def _add_agent_columns(run_dir: Path, group: str | None, k: int, index: float, rng: np.random.Generator) -> None:
    """train.parquet's per-agent gradient columns, as the trainer logs them, for the parallel role."""
    path = run_dir / rundir.TRAIN_PARQUET
    t = pq.read_table(path)
    roles = t.column("role").to_pylist()
    is_group = [r == group for r in roles]
    amp = [float(index + rng.normal(0, 0.05)) if g else math.nan for g in is_group]
    norms = [list(rng.uniform(0.5, 1.5, k)) if g else [] for g in is_group]
    t = t.append_column("n_agents", pa.array([k if g else 1 for g in is_group], pa.int64()))
    t = t.append_column("agent_grad_norms", pa.array(norms, pa.list_(pa.float64())))
    t = t.append_column("amplification_index", pa.array(amp, pa.float64()))
    t = t.append_column("agent_cos_mean", pa.array([0.3 if g else math.nan for g in is_group], pa.float64()))
    rundir.write_parquet_atomic(t, path)


def _plant_run(
    out: Path, wf: str, k: int, policy: str, seed: int, eff: Effects, rng: np.random.Generator
) -> dict[str, Any]:
    """One run of the sweep; returns what was planted."""
    p = POLICIES.index(policy)
    plain = f"{wf}-math-qwen3-0.6b-{policy}-s{seed}"
    run = f"{plain}-a{k}" if k else plain
    roles, group = ROLES[wf], GROUP_ROLES.get(wf)
    index = 1 + eff.amp_slope[p] * (k - 1) + rng.normal(0, 0.1) if group else math.nan
    # the terminal drop: planted, it grows with the index (slow decline and cliff depth); null, it is noise
    extra = eff.drop_per_index * (index - 1) if group else 0.0
    if not eff.drop_per_index:
        extra = 0.04 * rng.random()
    slow, depth = 0.02 + extra, 0.15 + 2 * extra
    peak = int(eff.peak_step[p] + EVAL_EVERY * rng.integers(-1, 2))
    cliff = rng.random() < eff.cliff_p[p]
    cliff_step = int(peak + EVAL_EVERY * rng.integers(2, 5)) if cliff else None
    shares = None
    if policy == "shared" and len(roles) > 1:
        t_cap = (
            (cliff_step if cliff else peak)
            - eff.capture_lead
            - detector_delay(len(roles))
            + rng.uniform(-1, 1) * eff.capture_spread
        )
        shares = _capture_shares(roles, group or roles[0], t_cap)
    rate = {
        c: (lambda x, r=r[p]: float(rng.binomial(200, r)) / 200)
        for c, r in eff.rates.items()
        if RATE_WORKFLOW.get(c, wf) == wf
    }
    if wf == "eval_opt":
        rate["mean_iterations"] = lambda x: 1.5
    parse = rate.pop("final_answer_parse_rate")
    params = {"voting": {"n_votes": k}, "orch_workers": {"max_subtasks": k}}.get(wf, {})
    run_dir = out / run
    write_synthetic_run(
        run_dir,
        plain,
        steps=STEPS,
        eval_every=EVAL_EVERY,
        accuracy=_accuracy(peak, cliff_step, slow, depth),
        seed=int(rng.integers(2**31)),
        diagnostics=rate,
        grad_sq_share=shares,
        parse_rate=parse,
        workflow_params=params,
    )
    for name in (rundir.CONFIG_JSON, rundir.DONE_JSON):  # the variant's id, as the launcher writes it
        data = json.loads((run_dir / name).read_text())
        data["run"] = run
        if name == rundir.CONFIG_JSON and k:
            data["variant"] = f"a{k}"
        rundir.write_json_atomic(data, run_dir / name)
    if group:
        _add_agent_columns(run_dir, group, k, index, rng)
    return {"run": run, "cliff": cliff, "index": index}


def planted_sweep(out: str | Path, effects: Effects, seeds: int = 8, rng_seed: int = 0) -> list[Path]:
    """Every run of the sweep under `out`; returns their directories."""
    out = Path(out)
    rng = np.random.default_rng(rng_seed)
    runs = [
        _plant_run(out, wf, k, policy, seed, effects, rng)["run"]
        for wf, k in CELLS
        for seed in range(seeds)
        for policy in POLICIES
    ]
    return [out / r for r in runs]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--null", action="store_true", help="plant no effect")
    parser.add_argument("--seeds", type=int, default=8)
    args = parser.parse_args()
    dirs = planted_sweep(args.out_dir, NULL if args.null else PLANTED, args.seeds)
    print(json.dumps({"runs": len(dirs), "out": args.out_dir}))
