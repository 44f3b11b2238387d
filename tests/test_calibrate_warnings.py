"""The early-warning calibration (analysis/calibrate.py, calibrate_warnings.py) on planted run directories.

Each planted run is built by construction: its eval curve either holds its peak (healthy) or falls at
CLIFF_STEP (a cliff), and every train signal is flat with small uniform noise, except where a test
plants a completion-length surge LEAD steps ahead of the cliff. The calibration must recover the planted
detector (recall 1 on the held-out runs, the planted lead, a threshold between the two outcomes) and,
with nothing planted, say that no detector meets the goal, with wide intervals.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from analysis import calibrate as cal
from analysis.__main__ import main
from analysis.calibrate_warnings import Goal, calibrate_all
from analysis.intervals import wilson
from analysis.settings import AnalysisSettings
from trainer import early_warning as ew
from trainer.contract import rundir

STEPS, EVAL_EVERY, CLIFF_STEP, LEAD = 40, 4, 28, 12
SURGE = 3.0  # the planted completion length over its flat level
CELLS = [
    ("voting", "isolated", True),
    ("voting", "shared", True),
    ("orch_workers", "isolated", False),
    ("orch_workers", "shared", False),
]


def accuracy(step: int, cliff: bool) -> float:
    """0.2 at the base, 0.6 from step 8; a cliff run drops to 0.1 at CLIFF_STEP and stays there."""
    if cliff and step >= CLIFF_STEP:
        return 0.1
    return 0.2 if step == 0 else 0.4 if step < 8 else 0.6


def train_rows(cliff: bool, planted: bool, salt: int) -> pd.DataFrame:
    """Flat train signals with uniform noise; a length surge from CLIFF_STEP - LEAD where `planted` and `cliff`."""
    rng = np.random.default_rng(salt)
    rows = []
    for step in range(1, STEPS + 1):
        for role in ("generator", "aggregator"):
            noise = rng.uniform(-1, 1, 8)
            surge = planted and cliff and step >= CLIFF_STEP - LEAD and role == "generator"
            rows.append(
                {
                    **{c: 1.0 for c in ("reward_std", "adv_abs_mean", "loss", "grad_sq_share", "lr", "time_s")},
                    "step": step,
                    "role": role,
                    "policy": role,
                    "n_turns": 8,
                    "n_tokens": 100,
                    "reward_mean": 0.5 + 0.05 * noise[0],
                    "grad_norm": 1.0 + 0.05 * noise[1],
                    "grad_cos_others": math.nan,
                    "entropy": 2.0 + 0.05 * noise[2],
                    "kl": 0.01 + 0.002 * noise[3],
                    "clip_ratio": 0.01 + 0.002 * noise[4],
                    "completion_len_mean": 20.0 * (SURGE if surge else 1.0) + 0.5 * noise[5],
                    "skipped": False,
                    "logp_mismatch": math.nan,
                    "zero_var_group_share": 0.3 + 0.05 * noise[6],
                }
            )
    return pd.DataFrame(rows)


def write_run(root: Path, run: str, cliff: bool, planted: bool, salt: int) -> Path:
    """A finished run directory: `train_rows` and the eval curve of `accuracy`."""
    evals = [
        {
            **{"split": "main", "n": 100, "final_answer_parse_rate": 1.0, "time_s": 1.0, "k": 1},
            **{"accuracy_std": math.nan, "n_episodes": 100},
            "step": s,
            "accuracy": accuracy(s, cliff),
            "pass_at_k": accuracy(s, cliff),
        }
        for s in range(0, STEPS + 1, EVAL_EVERY)
    ]
    d = root / run
    d.mkdir(parents=True)
    axes = rundir.parse_run_id(run).axes()
    training = {"max_steps": STEPS, "eval_every": EVAL_EVERY}
    rundir.write_json_atomic({"run": run, **axes, "training": training, "config_hash": "p"}, d / rundir.CONFIG_JSON)
    train = rundir.to_table(train_rows(cliff, planted, salt), rundir.TRAIN_SCHEMA)
    rundir.write_parquet_atomic(train, d / rundir.TRAIN_PARQUET)
    rundir.write_parquet_atomic(rundir.to_table(evals, rundir.EVAL_SCHEMA), d / rundir.EVAL_PARQUET)
    rundir.write_json_atomic({"run": run, "steps_done": STEPS, "config_hash": "p"}, d / rundir.DONE_JSON)
    return d


def sweep_dirs(
    root: Path, planted: bool, seeds: range = range(6), scales: tuple[str, ...] = ("qwen3-0.6b",)
) -> list[Path]:
    """Per seed and scale: two cliff runs (voting) and two healthy runs (orch_workers)."""
    dirs, salt = [], 0
    for seed in seeds:
        for scale in scales:
            for workflow, policy, cliff in CELLS:
                salt += 1
                dirs.append(write_run(root, f"{workflow}-math-{scale}-{policy}-s{seed}", cliff, planted, salt))
    return dirs


def test_planted_runs_are_labelled_by_construction(tmp_path):
    cases = [cal.load_case(d, AnalysisSettings()) for d in sweep_dirs(tmp_path, planted=True, seeds=range(1))]
    assert [c.cliff_step if c.cliff else None for c in cases] == [CLIFF_STEP, CLIFF_STEP, None, None]
    assert all(c.eval_every == EVAL_EVERY for c in cases)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("planted")
    out = root / "out"
    assert (
        main(
            [
                "calibrate-warnings",
                *map(str, sweep_dirs(root / "runs", planted=True)),
                "--calibrate-seeds",
                "0,1,2",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return out, pd.read_csv(out / "heldout.csv").set_index("detector")


def test_the_planted_detector_is_recovered_on_held_out_seeds(planted):
    _, table = planted
    surge = table.loc["length_surge"]
    assert surge["n_cliffs"] == 6 and surge["n_healthy"] == 6  # seeds 3-5: two cliffs and two healthy runs each
    assert surge["n_cliffs_reachable"] == 6  # every deadline (step 20) after the first train step
    assert surge["recall"] == 1 and surge["false_alarm_rate"] == 0 and surge["meets_goal"]
    # onset within the trailing window's lag after the planted surge; in evals, the same over EVAL_EVERY
    assert LEAD - ew.DEFAULT_THRESHOLDS["window"] < surge["median_lead_steps"] <= LEAD
    assert surge["median_lead_evals"] == pytest.approx(surge["median_lead_steps"] / EVAL_EVERY)
    assert 0 < surge["recall_lo"] < 1 and surge["recall_hi"] == 1  # Wilson over 6 cliffs
    # nothing else was planted: no other single detector meets the goal
    others = table.drop(index=["length_surge", "combined"])
    assert not others["meets_goal"].any()


def test_the_chosen_threshold_separates_the_runs_and_is_the_config_block(planted):
    out, table = planted
    thr = table.loc["length_surge", "threshold"]
    assert 1.2 < thr < SURGE  # above the flat runs' noise, below the surge
    block = yaml.safe_load((out / "early_warning.yaml").read_text())
    assert block["training"]["early_warning"]["length_surge_ratio"] == pytest.approx(thr)
    assert "on_warning" not in block["training"]  # the default (log) stays
    assert "length_surge" in block["training"]["early_warning"]["combine"]
    assert (out / "calibration.png").stat().st_size > 10_000
    md = (out / "heldout.md").read_text()
    assert "Meets it on point estimates: length_surge" in md


def test_the_calibration_replays_the_trainers_detectors(tmp_path):
    """The first onset the calibration reads at a threshold is the live trainer's (warnings_from_train)."""
    d = write_run(tmp_path, "voting-math-qwen3-0.6b-isolated-s0", cliff=True, planted=True, salt=7)
    case = cal.load_case(d, AnalysisSettings())
    sig = cal.case_signals(case, ew.DEFAULT_THRESHOLDS)
    for thr in (1.3, 2.0, 2.9):
        live = ew.warnings_from_train(pd.read_parquet(d / rundir.TRAIN_PARQUET), {"length_surge_ratio": thr})
        live_first = live[live["detector"] == "length_surge"]["step"].min()
        assert cal.first_firing(sig["length_surge"], thr, above=True) == live_first
        assert live[live["detector"] == "length_surge"]["version"].eq(ew.DETECTOR_VERSIONS["length_surge"]).all()


def test_without_a_signal_no_detector_meets_the_goal_and_intervals_are_wide(tmp_path):
    out = tmp_path / "out"
    main(
        [
            "calibrate-warnings",
            *map(str, sweep_dirs(tmp_path / "runs", planted=False)),
            "--calibrate-seeds",
            "0,1,2",
            "--out",
            str(out),
        ]
    )
    table = pd.read_csv(out / "heldout.csv")
    assert not table["meets_goal"].any()
    # 6 held-out cliffs say little: even 0 of 6 leaves a Wilson interval [0, 0.39]
    assert ((table["recall_hi"] - table["recall_lo"]) > 0.35).all()
    assert (table["recall"] < Goal.recall).all()
    assert "No detector meets the goal" in (out / "heldout.md").read_text()


def test_calibrate_on_an_axis_value_holds_out_the_other_scale(tmp_path):
    dirs = sweep_dirs(tmp_path, planted=True, seeds=range(2), scales=("qwen3-0.6b", "qwen3-4b"))
    cases = [cal.load_case(d, AnalysisSettings()) for d in dirs]
    calib, held = cal.split_cases(cases, None, [cal.parse_selector("scale=qwen3-0.6b")])
    assert {c.axes["scale"] for c in calib} == {"qwen3-0.6b"} and {c.axes["scale"] for c in held} == {"qwen3-4b"}
    table, _, settings = calibrate_all(calib, held, ew.DEFAULT_THRESHOLDS, Goal(), n_boot=200, seed=0)
    surge = table.set_index("detector").loc["length_surge"]
    assert surge["recall"] == 1 and surge["false_alarm_rate"] == 0
    assert settings["length_surge_ratio"] == surge["threshold"]


def test_bad_selections_are_errors_that_say_what_they_held(tmp_path):
    cases = [cal.load_case(d, AnalysisSettings()) for d in sweep_dirs(tmp_path, planted=True, seeds=range(2))]
    with pytest.raises(ValueError, match="select 8 calibration and 0 held-out"):
        cal.split_cases(cases, [0, 1], [])
    with pytest.raises(ValueError, match="AXIS=VALUE"):
        cal.parse_selector("size=big")
    with pytest.raises(ValueError, match="both must be some"):
        healthy_only = [c for c in cases if not c.cliff]
        from analysis.calibrate_warnings import run

        run(
            [str(tmp_path / c.run) for c in healthy_only],
            tmp_path / "o",
            seeds=[0],
            selectors=[],
            analysis=AnalysisSettings(),
            early_warning={},
            goal=Goal(),
        )
    (tmp_path / cases[0].run / rundir.DONE_JSON).unlink()
    with pytest.raises(ValueError, match=f"{cases[0].run}: no done.json"):
        cal.load_case(tmp_path / cases[0].run, AnalysisSettings())


def test_a_cliff_within_two_evals_of_the_start_counts_as_out_of_reach():
    """A cliff at step 2 x eval_every has its deadline at step 0, before any train step: no detector can
    warn it in time, and the verdict says how many held-out cliffs are so."""
    from analysis.calibrate_warnings import verdict

    early = cal.Case("a", {}, eval_every=4.0, cliff_step=8.0, roles=[], first_step=1.0)
    late = cal.Case("b", {}, eval_every=4.0, cliff_step=12.0, roles=[], first_step=1.0)
    judged = cal.judge([early, late], [{}, {}], ew.BY_NAME["kl"], 0.5, min_lead_evals=2)
    assert judged["n_cliffs"] == 2 and judged["n_cliffs_reachable"] == 1 and judged["recall"] == 0
    table = pd.DataFrame([{**judged, "detector": "kl", "meets_goal": False}])
    assert "1 of the 2 held-out cliffs come less than 2 evals after the first train step" in verdict(table, Goal())


def test_the_figure_draws_an_interval_whose_bound_rounds_past_its_value():
    from analysis.warning_figures import calibration_figure

    lo, _ = wilson(0, 18)
    row = {"detector": "kl", "threshold": 0.5, "recall": 0.0, "recall_lo": lo + 1e-17, "recall_hi": 0.18}
    row |= {"false_alarm_rate": 0.0, "false_alarm_lo": 1e-17, "false_alarm_hi": 0.19}
    fig = calibration_figure(pd.DataFrame([row]), 0.75, 0.2, 2)
    assert len(fig.axes[0].lines) >= 1
