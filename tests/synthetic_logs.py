"""Synthetic run directories in the trainer's exact format, for analysis tests and benchmarks.

    python -m tests.synthetic_logs OUT_DIR RUN... --steps 500          plain runs (a rise, then a plateau)
    python -m tests.synthetic_logs OUT_DIR RUN... --steps 500 --planted  with the study's phenomena planted

`write_synthetic_run` writes one run whose curve, diagnostics and gradients the caller chooses (tests use
it with known answers); `planted_run` draws a run with the phenomena the study reports, so that figures
made from a synthetic sweep show something: Isolated-Policy peaks higher and falls off cliffs more often,
each cliff with a failure signature in the eval diagnostics from the cliff step on; parallel same-role
agents (voters, workers) get gradients that grow with their number under Isolated-Policy; under
Shared-Policy one role's share of the squared gradient grows until it captures the model.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trainer.contract import rundir
from trainer.contract.rundir import parse_run_id

ROLES = {
    "single": ["generator"],
    "eval_opt": ["generator", "evaluator"],
    "voting": ["generator", "aggregator"],
    "orch_workers": ["orchestrator", "worker", "synthesizer"],
}
GROUP_ROLES = {"voting": "generator", "orch_workers": "worker"}  # parallel same-role agents per episode
SPLITS = {"math": "main", "code": "main"}

# role -> step array -> value; a float is a constant
PerStep = Callable[[np.ndarray], np.ndarray] | float


def _per_step(value: PerStep, steps: np.ndarray) -> np.ndarray:
    return np.broadcast_to(np.asarray(value(steps) if callable(value) else value, dtype=float), steps.shape).copy()


def write_synthetic_run(
    run_dir: Path,
    run: str,
    *,
    steps: int = 30,
    eval_every: int = 5,
    accuracy: Callable[[float], float] | None = None,
    seed: int = 0,
    diagnostics: dict[str, Callable[[float], float]] | None = None,
    grad_norm: dict[str, PerStep] | None = None,
    grad_sq_share: dict[str, PerStep] | None = None,
    n_turns: dict[str, PerStep] | None = None,
    completion_len: dict[str, PerStep] | None = None,
    parse_rate: Callable[[float], float] | None = None,
    workflow_params: dict[str, Any] | None = None,
    samples: list[dict[str, Any]] | None = None,
    splits: list[str] | None = None,
) -> None:
    """A finished run: config.json, train/eval/samples parquet and done.json, as the trainer writes them.

    `accuracy(step)` gives the eval curve (default: a rise then a plateau); `diagnostics` maps an eval
    column to `f(step)`; `grad_norm`, `grad_sq_share`, `n_turns`, `completion_len` map a role to a constant
    or a function of the step array (defaults: noisy constants; shares normalised per policy).
    """
    rid = parse_run_id(run)
    rng = np.random.default_rng(seed)
    accuracy = accuracy or (lambda s: 0.2 + 0.4 * (1 - math.exp(-s / max(steps / 4, 1))))
    roles = ROLES[rid.workflow]
    policy = {r: ("shared" if rid.policy == "shared" else r) for r in roles}
    params = (
        workflow_params
        if workflow_params is not None
        else {"voting": {"n_votes": 3}, "orch_workers": {"max_subtasks": 3}}.get(rid.workflow, {})
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = {
        "run": run,
        **rid.axes(),
        "workflow_params": params,
        "training": {"max_steps": steps, "eval_every": eval_every},
        "config_hash": "synthetic",
    }
    rundir.write_json_atomic(cfg, run_dir / rundir.CONFIG_JSON)

    s = np.arange(1, steps + 1)
    train = _train_frame(s, roles, policy, rng, accuracy, grad_norm, grad_sq_share, n_turns, completion_len)
    evals = _eval_frame(steps, eval_every, accuracy, parse_rate, diagnostics, splits or ["main"])
    rundir.write_parquet_atomic(rundir.to_table(train, rundir.TRAIN_SCHEMA), run_dir / rundir.TRAIN_PARQUET)
    rundir.write_parquet_atomic(rundir.to_table(evals, rundir.EVAL_SCHEMA), run_dir / rundir.EVAL_PARQUET)
    rundir.write_parquet_atomic(rundir.to_table(samples or [], rundir.SAMPLES_SCHEMA), run_dir / rundir.SAMPLES_PARQUET)
    rundir.write_json_atomic(
        {"run": run, "steps_done": steps, "steps_expected": steps, "config_hash": "synthetic", "wall_time_s": 1.0},
        run_dir / rundir.DONE_JSON,
    )


def _train_frame(
    s: np.ndarray,
    roles: list[str],
    policy: dict[str, str],
    rng: np.random.Generator,
    accuracy: Callable[[float], float],
    grad_norm: dict[str, PerStep] | None,
    grad_sq_share: dict[str, PerStep] | None,
    n_turns: dict[str, PerStep] | None,
    completion_len: dict[str, PerStep] | None,
) -> pd.DataFrame:
    """train.parquet's rows: one per step and role (defaults: noisy norms, shares normalised per policy)."""
    cols: dict[str, list[np.ndarray]] = {}
    norms = {
        r: _per_step((grad_norm or {}).get(r, lambda x, i=i: (1 + i) * (1 + rng.random(x.shape))), s)
        for i, r in enumerate(roles)
    }
    if grad_sq_share:
        shares = {r: _per_step(grad_sq_share[r], s) for r in roles}
    else:  # each role's share of its own policy's squared gradient
        shares = {}
        for r in roles:
            mates = [m for m in roles if policy[m] == policy[r]]
            shares[r] = norms[r] ** 2 / sum(norms[m] ** 2 for m in mates)
    n = len(s)
    for r in roles:
        block = {
            "step": s,
            "role": np.full(n, r, dtype=object),
            "policy": np.full(n, policy[r], dtype=object),
            "n_turns": _per_step((n_turns or {}).get(r, 32.0), s).astype(np.int64),
            "n_tokens": np.full(n, 512),
            "reward_mean": np.array([accuracy(x) for x in s]),
            "reward_std": np.full(n, 0.4),
            "adv_abs_mean": np.full(n, 0.8),
            "loss": np.zeros(n),
            "grad_norm": norms[r],
            "grad_sq_share": shares[r],
            "grad_cos_others": np.full(n, 0.1),
            "entropy": np.ones(n),
            "kl": np.full(n, np.nan),
            "clip_ratio": np.zeros(n),
            "completion_len_mean": _per_step((completion_len or {}).get(r, 16.0), s),
            "lr": np.full(n, 2e-5),
            "skipped": np.zeros(n, dtype=bool),
            "logp_mismatch": np.full(n, np.nan),
            "time_s": np.ones(n),
        }
        for k, v in block.items():
            cols.setdefault(k, []).append(v)
    return pd.DataFrame({k: np.concatenate(v) for k, v in cols.items()}).sort_values(["step", "role"], kind="stable")


def _eval_frame(
    steps: int,
    eval_every: int,
    accuracy: Callable[[float], float],
    parse_rate: Callable[[float], float] | None,
    diagnostics: dict[str, Callable[[float], float]] | None,
    splits: list[str],
) -> pd.DataFrame:
    """eval.parquet's rows: one per eval step (every `eval_every`, and the last) and split."""
    eval_steps = list(range(0, steps + 1, eval_every))
    if eval_steps[-1] != steps:
        eval_steps.append(steps)
    return pd.DataFrame(
        [
            rundir.with_eval_samples(
                {
                    "step": x,
                    "split": sp,
                    "accuracy": accuracy(x),
                    "n": 200,
                    "final_answer_parse_rate": parse_rate(x) if parse_rate else 1.0,
                    "time_s": 1.0,
                    **{k: f(x) for k, f in (diagnostics or {}).items()},
                }
            )
            for x in eval_steps
            for sp in splits
        ]
    )


def _unit(run: str, salt: str) -> float:
    """A number in [0, 1) fixed by the run id: planted effects do not depend on the order runs are written."""
    return int(hashlib.sha256(f"{run}/{salt}".encode()).hexdigest()[:12], 16) / 16**12


def planted_run(
    run_dir: Path, run: str, *, steps: int = 500, eval_every: int = 10, samples_per_eval: int = 4
) -> dict[str, Any]:
    """A run with the study's phenomena planted; returns what was planted (cliff step, signature, capture role)."""
    rid = parse_run_id(run)
    scales = ["qwen3-0.6b", "qwen3-1.7b", "qwen3-4b"]
    k = scales.index(rid.scale) if rid.scale in scales else 0
    u = lambda salt: _unit(run, salt)  # noqa: E731
    cell_u = lambda salt: _unit(f"{rid.cell}", salt)  # noqa: E731  the same for every seed of a cell
    base = {"math": 0.30, "code": 0.18}[rid.task] + 0.12 * k
    wf_gain = {"single": 0.04, "eval_opt": 0.06, "voting": 0.09, "orch_workers": 0.02}[rid.workflow]
    gain = wf_gain + (0.03 if rid.task == "math" else -0.01) * (k + 1) + 0.04 * (cell_u("gain") - 0.3)
    if rid.policy == "isolated":
        gain += 0.04
    p_cliff = {"shared": 0.25, "isolated": 0.6}[rid.policy] if rid.workflow != "single" else 0.1
    cliff = u("cliff") < p_cliff
    cliff_step = int(eval_every * round((0.45 + 0.4 * u("cliff_at")) * steps / eval_every)) if cliff else None
    depth = 0.12 + 0.2 * u("depth")
    rise = steps * (0.15 + 0.1 * u("rise"))
    noise = np.random.default_rng(int(u("noise") * 2**32))

    def accuracy(x: float) -> float:
        a = base + gain * (1 - math.exp(-x / rise))
        if cliff_step is not None and x >= cliff_step:
            a -= depth + gain * 0.3
        return float(np.clip(a + (noise.normal(0, 0.008) if x > 0 else 0.0), 0, 1))

    after = lambda x: cliff_step is not None and x >= cliff_step  # noqa: E731
    signature, diagnostics, parse = _planted_diagnostics(rid, u, accuracy, after)
    if not cliff:
        signature = None
    roles = ROLES[rid.workflow]
    # the number of parallel agents varies with the seed so that amplification has an x axis
    n_agents = 2 + rid.seed % 4
    params = {"voting": {"n_votes": n_agents}, "orch_workers": {"max_subtasks": n_agents}}.get(rid.workflow, {})
    n_turns, grad_norm, share, capture_role = _planted_gradients(rid, roles, u, steps, cliff_step, n_agents)
    samples = _samples(rid, roles, steps, eval_every, samples_per_eval, n_agents, after, signature)
    write_synthetic_run(
        run_dir,
        run,
        steps=steps,
        eval_every=eval_every,
        accuracy=accuracy,
        seed=int(u("seed") * 2**31),
        diagnostics=diagnostics,
        grad_norm=grad_norm,
        grad_sq_share=share,
        n_turns=n_turns,
        parse_rate=parse,
        workflow_params=params,
        samples=samples,
        splits=[SPLITS[rid.task]],
    )
    return {"cliff_step": cliff_step, "signature": signature, "capture_role": capture_role, "n_agents": n_agents}


def _planted_diagnostics(
    rid, u: Callable[[str], float], accuracy: Callable[[float], float], after: Callable[[float], bool]
) -> tuple[str | None, dict[str, Callable], Callable | None]:
    """The workflow's failure signature, its eval diagnostics (stuck from the cliff on) and parse rate."""
    signature, diagnostics = None, {}
    parse = None
    if rid.workflow == "eval_opt":
        signature = "evaluator_always_accepts" if u("sig") < 0.6 else "evaluator_always_rejects"
        stuck = 1.0 if signature == "evaluator_always_accepts" else 0.0
        diagnostics = {
            "evaluator_accept_rate": lambda x: stuck if after(x) else 0.55 + 0.1 * math.sin(x / 37),
            "evaluator_accuracy": lambda x: 0.5 if after(x) else 0.7,
            "generator_first_accuracy": lambda x: accuracy(x) * 0.95,
            "verdict_parse_rate": lambda x: 0.97,
            "mean_iterations": lambda x: 1.0 if after(x) else 1.8,
        }
    elif rid.workflow == "voting":
        signature = "aggregator_same_slot" if u("sig") < 0.5 else "voters_identical"
        diagnostics = {
            "top_slot_share": lambda x: 1.0 if after(x) and signature == "aggregator_same_slot" else 0.4,
            "vote_agreement": lambda x: 1.0 if after(x) and signature == "voters_identical" else 0.55,
            "voter_accuracy": lambda x: accuracy(x) * 0.9,
            "any_voter_correct": lambda x: accuracy(x) + 0.1,
            "aggregator_accuracy": lambda x: 0.8,
            "choice_parse_rate": lambda x: 0.99,
        }
    elif rid.workflow == "orch_workers":
        signature = "orchestrator_stops_decomposing" if u("sig") < 0.7 else "answers_stop_parsing"
        diagnostics = {
            "subtasks_mean": lambda x: 1.0 if after(x) and signature == "orchestrator_stops_decomposing" else 2.6,
            "plan_parse_rate": lambda x: 0.95,
            "worker_success": lambda x: 0.9,
        }
        parse = lambda x: 0.3 if after(x) and signature == "answers_stop_parsing" else 0.97  # noqa: E731
    return signature, diagnostics, parse


def _planted_gradients(
    rid, roles: list[str], u: Callable[[str], float], steps: int, cliff_step: int | None, n_agents: int
) -> tuple[dict[str, float], dict[str, PerStep], dict[str, PerStep] | None, str | None]:
    """Turns per role, gradient norms (amplified for Isolated same-role agents) and Shared capture."""
    group = GROUP_ROLES.get(rid.workflow)
    episodes = 64 * 8
    n_turns = {r: float(episodes * (n_agents if r == group else 1)) for r in roles}
    rng = np.random.default_rng(int(u("grad") * 2**32))
    grad_norm, share, capture_role = {}, None, None
    for i, r in enumerate(roles):
        level = 0.9 + 0.1 * i
        amp = n_agents**0.8 if (r == group and rid.policy == "isolated") else 1.0
        grad_norm[r] = lambda x, level=level, amp=amp: (
            level
            * amp
            * np.exp(rng.normal(0, 0.15, x.shape))
            * (1 + (0.8 * (x >= cliff_step) if cliff_step is not None else 0))
        )
    if rid.policy == "shared" and len(roles) > 1:
        capture_role = group or roles[int(u("capture") * len(roles))]
        start, end = 1 / len(roles), 0.6 + 0.3 * u("capture_level")
        t_cap = steps * (0.2 + 0.4 * u("capture_at"))
        others = [r for r in roles if r != capture_role]

        def dominant(x: np.ndarray) -> np.ndarray:
            return start + (end - start) / (1 + np.exp(-(x - t_cap) / (steps / 20)))

        share = {capture_role: dominant}
        for j, r in enumerate(others):
            w = (j + 1) / sum(range(1, len(others) + 1))
            share[r] = lambda x, w=w: (1 - dominant(x)) * w
    return n_turns, grad_norm, share, capture_role


def _samples(rid, roles, steps, eval_every, per_eval, n_agents, after, signature) -> list[dict[str, Any]]:
    """A few episodes per eval, one row per turn, with boxed answers the analysis can read."""
    rows = []
    for step in range(0, steps + 1, eval_every):
        for e in range(per_eval):
            turns = []
            for r in roles:
                count = n_agents if r == GROUP_ROLES.get(rid.workflow) else 1
                for a in range(count):
                    same = after(step) and signature == "voters_identical"
                    turns.append((r, a, f"so the answer is \\boxed{{{e if same else e + a}}}"))
            final = str(e)
            for k, (r, a, text) in enumerate(turns):
                rows.append(
                    {
                        "step": step,
                        "split": SPLITS[rid.task],
                        "episode": e,
                        "problem_id": f"p{e}",
                        "turn": k,
                        "role": r,
                        "agent": a,
                        "prompt": "Solve.",
                        "completion": text,
                        "reward": 1.0,
                        "final_answer": final,
                        "correct": e % 2 == 0,
                    }
                )
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("runs", nargs="+", help="run ids")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--planted", action="store_true", help="plant cliffs, signatures, capture, amplification")
    args = parser.parse_args()
    for i, run in enumerate(args.runs):
        if args.planted:
            planted_run(Path(args.out_dir) / run, run, steps=args.steps)
        else:
            write_synthetic_run(Path(args.out_dir) / run, run, steps=args.steps, seed=i)
    print(json.dumps({"runs": len(args.runs), "out": args.out_dir}))
