"""Detectors on synthetic logs with known answers: cliffs, capture, a planted failure signature."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.curves import summarize_curve
from analysis.gradients import capture
from analysis.per_run import analyse_run
from analysis.runs import load_run
from analysis.settings import AnalysisSettings
from analysis.signatures import majority_ignored, run_signatures
from tests.synthetic_logs import write_synthetic_run

STEPS = np.arange(0, 110, 10)


def test_cliff_at_a_known_step():
    acc = [0.2, 0.3, 0.4, 0.5, 0.55, 0.55, 0.5, 0.3, 0.25, 0.2, 0.2]
    s = summarize_curve(STEPS, acc, terminal_k=3, cliff_drop=0.1)
    assert s["cliff"] and s["cliff_step"] == 70 and s["peak_step"] == 40
    assert math.isclose(s["cliff_depth"], 0.55 - (0.25 + 0.2 + 0.2) / 3)  # peak - terminal (last 3)


def test_dip_and_recover_is_no_cliff():
    acc = [0.2, 0.4, 0.5, 0.2, 0.2, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]
    s = summarize_curve(STEPS, acc, cliff_drop=0.1)
    assert not s["cliff"] and math.isnan(s["cliff_step"])


def test_monotone_and_flat():
    mono = summarize_curve(STEPS, np.linspace(0.1, 0.6, len(STEPS)), terminal_k=1)
    assert not mono["cliff"] and mono["peak_step"] == 100 and math.isclose(mono["gain_terminal"], 0.5)
    flat = summarize_curve(STEPS, np.full(len(STEPS), 0.3))
    assert not flat["cliff"] and flat["gain_peak"] == 0 and flat["peak_step"] == 0


def test_nan_evals_neither_break_nor_make_a_cliff():
    acc = [0.2, 0.5, np.nan, 0.6, 0.3, np.nan, 0.3, 0.3, np.nan, 0.3, np.nan]
    s = summarize_curve(STEPS, acc, terminal_k=3, cliff_drop=0.1)
    assert s["n_evals"] == 7 and s["cliff"] and s["cliff_step"] == 40 and math.isclose(s["terminal_acc"], 0.3)


def test_capture_names_the_dominant_role():
    steps = np.arange(1, 201)
    share = np.clip(0.34 + 0.6 * (steps > 80), 0, 1)  # the worker takes 94% from step 81
    rows = []
    for role, sh in (("worker", share), ("orchestrator", (1 - share) / 2), ("synthesizer", (1 - share) / 2)):
        rows.append(
            pd.DataFrame({"step": steps, "role": role, "policy": "shared", "grad_sq_share": sh, "skipped": False})
        )
    cap = capture(pd.concat(rows), cliff_step=150.0, capture_share=0.6, smoothing_steps=1)
    assert cap["capture_role"] == "worker" and math.isclose(cap["capture_index"], 0.94)
    assert cap["capture_step"] == 81


def test_planted_evaluator_collapse_found_with_its_step(tmp_path):
    run = "eval_opt-math-tiny-isolated-s0"
    write_synthetic_run(
        tmp_path / run,
        run,
        steps=100,
        eval_every=10,
        accuracy=lambda s: 0.5 if s < 60 else 0.2,
        diagnostics={"evaluator_accept_rate": lambda s: 0.5 if s < 60 else 1.0},
    )
    logs = load_run(tmp_path / run)
    sigs = run_signatures(logs.evals, logs.train, logs.samples)
    assert list(sigs["signature"]) == ["evaluator_always_accepts"] and sigs["onset_step"].iloc[0] == 60
    row = analyse_run(logs, AnalysisSettings(cliff_drop=0.1, smoothing_window=1))["runs"].iloc[0]
    assert row["cliff"] and row["cliff_step"] == 60 and row["cliff_cause"] == "evaluator_always_accepts"


def test_majority_ignored_reads_boxed_votes_and_skips_episodes_without_any():
    """Unboxed votes are no votes: two of three unboxed (seen in a demo's voting x code run) once failed the analysis."""
    rows = []
    for episode, (votes, final) in enumerate(
        [
            (["\\boxed{3}", "\\boxed{3}", "\\boxed{4}"], "4"),
            (["\\boxed{5}", "\\boxed{5}", "x"], "5"),
            (["x", "y", "\\boxed{5}"], "5"),
        ]
    ):  # no boxed majority: skipped
        rows += [
            {
                "step": 0,
                "split": "math",
                "episode": episode,
                "role": "generator",
                "completion": v,
                "final_answer": final,
            }
            for v in votes
        ]
    math_rate = majority_ignored(pd.DataFrame(rows))
    assert math_rate["majority_ignored_rate"].tolist() == [0.5]  # episode 0 departs from its majority, 1 follows
    code = pd.DataFrame(
        [
            {
                "step": 0,
                "split": "code",
                "episode": 0,
                "role": "generator",
                "completion": "def f(x):\n    return x",
                "final_answer": "",
            }
        ]
        * 3
    )
    assert majority_ignored(code).empty
