"""Failure signatures: how a run behaves at the end, from eval diagnostics, samples and train logs.

A signature holds at an eval when its diagnostic crosses a threshold (config.yaml `analysis.signatures`);
it is a run's terminal behaviour when it holds from some step to the end (its onset), as a cliff does.
A signature that already held at step 0 belongs to the base model, not to training (`at_base`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

DEFAULT_THRESHOLDS = {
    "accept_high": 0.95,  # evaluator accepts (almost) everything
    "accept_low": 0.05,  # evaluator rejects (almost) everything
    "same_slot": 0.95,  # aggregator picks the same slot (almost) always
    "ignores_majority": 0.5,  # aggregator departs from a strict voter majority this often
    "identical_votes": 0.98,  # voters agree (almost) always
    "single_subtask": 1.05,  # orchestrator plans at most this many subtasks on average
    "parse_low": 0.5,  # final answers parse this rarely
    "length_collapse": 0.3,  # a role's completions shrink to this fraction of their early length
}


@dataclass(frozen=True)
class EvalSignature:
    """A signature read from one eval column: holds where `test(value, thresholds)` is true."""

    name: str
    column: str
    test: Callable[[np.ndarray, dict[str, float]], np.ndarray]
    role: str


EVAL_SIGNATURES = [
    EvalSignature("evaluator_always_accepts", "evaluator_accept_rate", lambda v, t: v >= t["accept_high"], "evaluator"),
    EvalSignature("evaluator_always_rejects", "evaluator_accept_rate", lambda v, t: v <= t["accept_low"], "evaluator"),
    EvalSignature("aggregator_same_slot", "top_slot_share", lambda v, t: v >= t["same_slot"], "aggregator"),
    EvalSignature(
        "aggregator_ignores_majority", "majority_ignored_rate", lambda v, t: v >= t["ignores_majority"], "aggregator"
    ),
    EvalSignature("voters_identical", "vote_agreement", lambda v, t: v >= t["identical_votes"], "generator"),
    EvalSignature(
        "orchestrator_stops_decomposing", "subtasks_mean", lambda v, t: v <= t["single_subtask"], "orchestrator"
    ),
    EvalSignature("answers_stop_parsing", "final_answer_parse_rate", lambda v, t: v <= t["parse_low"], "final"),
]
SIGNATURE_NAMES = [s.name for s in EVAL_SIGNATURES] + ["completion_collapse"]

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def sustained_onset(steps: np.ndarray, holds: np.ndarray, valid: np.ndarray) -> float:
    """The first step from which `holds` is true at every valid point to the end; NaN if it fails at the end."""
    ok = np.where(valid, holds, True)  # a missing value neither breaks nor makes a run
    if not valid.any() or not ok[np.flatnonzero(valid)[-1]]:
        return math.nan
    breaks = np.flatnonzero(~ok)
    start = int(breaks[-1]) + 1 if len(breaks) else 0
    first_valid = start + int(np.flatnonzero(valid[start:])[0])
    return float(steps[first_valid])


def majority_ignored(samples: pd.DataFrame) -> pd.DataFrame:
    """Per (step, split): how often the final answer departs from a strict majority of the voters' answers.

    Answers are read as the last \\boxed{...} of each voter's completion (the trainer's extractor is richer;
    this is enough to see an aggregator that stops following its voters). Episodes with no majority don't count.
    """
    voters = samples[samples["role"] == "generator"]
    if not len(voters):
        return pd.DataFrame(columns=["step", "split", "majority_ignored_rate"])
    answers = voters["completion"].map(lambda t: (_BOXED.findall(t) or [None])[-1])
    rows: dict[tuple[Any, Any], list[bool]] = {}
    for (step, split, _), g in voters.assign(answer=answers).groupby(["step", "split", "episode"], sort=False):
        # an unboxed vote is no vote; pandas' string dtype stores it as NaN, not None
        counts = Counter(a for a in g["answer"] if isinstance(a, str))
        if not counts:
            continue
        top, n = counts.most_common(1)[0]
        if n * 2 > len(g):
            rows.setdefault((step, split), []).append(str(g["final_answer"].iloc[0]).strip() != top.strip())
    return pd.DataFrame(
        [{"step": s, "split": sp, "majority_ignored_rate": float(np.mean(v))} for (s, sp), v in rows.items()],
        columns=["step", "split", "majority_ignored_rate"],
    )


def eval_signatures(evals: pd.DataFrame, thresholds: dict[str, float]) -> list[dict[str, Any]]:
    """The signatures that hold to the end of each eval split, with onset step and base/end values."""
    out = []
    for split, g in evals.sort_values("step").groupby("split", sort=False):
        steps = g["step"].to_numpy(dtype=float)
        for sig in EVAL_SIGNATURES:
            if sig.column not in g:
                continue
            v = g[sig.column].to_numpy(dtype=float)
            valid = ~np.isnan(v)
            holds = np.zeros_like(valid)
            holds[valid] = sig.test(v[valid], thresholds)
            onset = sustained_onset(steps, holds, valid)
            if math.isnan(onset):
                continue
            at_base = bool(steps[0] == 0 and valid[0] and holds[0])
            out.append(
                {
                    "split": split,
                    "signature": sig.name,
                    "role": sig.role,
                    "onset_step": onset,
                    "at_base": at_base,
                    "value_base": float(v[0]),
                    "value_end": float(v[valid][-1]),
                }
            )
    return out


def length_collapse(train: pd.DataFrame, threshold: float, smoothing_steps: int = 5) -> list[dict[str, Any]]:
    """Roles whose mean completion length falls to `threshold` x its length over the first steps, to the end."""
    out = []
    for role, g in train.sort_values("step").groupby("role", sort=False):
        length = g["completion_len_mean"].rolling(smoothing_steps, min_periods=1).mean().to_numpy(dtype=float)
        steps = g["step"].to_numpy(dtype=float)
        early = np.nanmedian(g["completion_len_mean"].to_numpy(dtype=float)[: max(smoothing_steps, 1)])
        if not early > 0:
            continue
        valid = ~np.isnan(length)
        onset = sustained_onset(steps, length <= threshold * early, valid)
        if not math.isnan(onset) and onset > steps[0]:
            out.append(
                {
                    "split": None,
                    "signature": "completion_collapse",
                    "role": role,
                    "onset_step": onset,
                    "at_base": False,
                    "value_base": float(early),
                    "value_end": float(length[valid][-1]),
                }
            )
    return out


def run_signatures(
    evals: pd.DataFrame, train: pd.DataFrame, samples: pd.DataFrame, thresholds: dict[str, float] | None = None
) -> pd.DataFrame:
    """Every terminal signature of one run (one row each), reading samples for the aggregator's majority."""
    t = {**DEFAULT_THRESHOLDS, **(thresholds or {})}
    unknown = sorted(set(thresholds or {}) - set(DEFAULT_THRESHOLDS))
    if unknown:
        raise ValueError(f"analysis.signatures: unknown threshold(s) {unknown}; known are {sorted(DEFAULT_THRESHOLDS)}")
    if len(samples) and "majority_ignored_rate" not in evals:
        evals = evals.merge(majority_ignored(samples), on=["step", "split"], how="left")
    rows = eval_signatures(evals, t) + length_collapse(train, t["length_collapse"])
    return pd.DataFrame(
        rows, columns=["split", "signature", "role", "onset_step", "at_base", "value_base", "value_end"]
    )


def cliff_cause(signatures: pd.DataFrame, split: str, cliff_step: float, eval_every: float) -> tuple[str | None, float]:
    """The signature that names a cliff: the one (not at base) whose onset is nearest the cliff step,
    preferring one that began no later than an eval after it; (None, NaN) when none did."""
    if math.isnan(cliff_step) or not len(signatures):
        return None, math.nan
    cand = signatures[~signatures["at_base"] & (signatures["split"].isna() | (signatures["split"] == split))]
    if not len(cand):
        return None, math.nan
    dist = (cand["onset_step"] - cliff_step).to_numpy(dtype=float)
    late = dist > eval_every  # began well after the cliff: a consequence more than a cause
    key = np.where(late, 1e12 + dist, np.abs(dist))
    i = int(np.argmin(key))
    return str(cand["signature"].iloc[i]), float(cand["onset_step"].iloc[i])
