"""The claim tables (analysis/claims.py) on planted sweeps (tests/planted_claims.py): each recovers its
planted effect with the right sign and an interval that excludes zero, and with nothing planted its interval
includes zero; the interval statistics against reference values; missing columns degrade to a note."""

from __future__ import annotations

import json
import math

import pandas as pd
import pyarrow.parquet as pq
import pytest

from analysis.claim_signatures import RATES
from analysis.claims import claim_tables
from analysis.intervals import binom_test, clopper_pearson, mcnemar, newcombe, wilson
from analysis.names import CLAIM_TABLES, CLAIMS, FIGURES, TABLES
from analysis.per_run import summarize_runs
from analysis.settings import AnalysisSettings
from analysis.summary import add_single_baseline
from tests.planted_claims import NULL, PLANTED, planted_sweep
from tests.synthetic_logs import write_synthetic_run
from trainer.contract import rundir


def _tables(out, effects, seeds: int = 6) -> dict[str, pd.DataFrame]:
    parts = summarize_runs(planted_sweep(out, effects, seeds=seeds), AnalysisSettings())
    assert not len(parts["problems"]), parts["problems"]
    return claim_tables(add_single_baseline(parts["runs"]), parts["curves"], terminal_k=3, n_boot=400, seed=0)


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> dict[str, pd.DataFrame]:
    return _tables(tmp_path_factory.mktemp("planted"), PLANTED)


@pytest.fixture(scope="module")
def null(tmp_path_factory) -> dict[str, pd.DataFrame]:
    return _tables(tmp_path_factory.mktemp("null"), NULL)


def _excludes_zero(lo: float, hi: float, sign: int) -> bool:
    return (lo > 0 and hi > 0) if sign > 0 else (lo < 0 and hi < 0)


def _includes_zero(lo: float, hi: float) -> bool:
    return lo <= 0 <= hi


# --- the statistics ----------------------------------------------------------------------------------------------
def test_intervals_match_reference_values():
    """Reference values from R (binom.test, prop.test-free Wilson, Newcombe 1998's worked example)."""
    assert wilson(3, 10) == pytest.approx((0.1078, 0.6032), abs=1e-4)
    assert clopper_pearson(3, 10) == pytest.approx((0.0667, 0.6525), abs=1e-4)
    assert clopper_pearson(0, 10)[0] == 0 and clopper_pearson(10, 10)[1] == 1
    assert binom_test(2, 12) == pytest.approx(0.03857, abs=1e-5)
    assert newcombe(56, 70, 48, 80) == pytest.approx((0.2, 0.0524, 0.3339), abs=1e-4)
    m = mcnemar(10, 2, 30)
    assert m["diff"] == pytest.approx(8 / 30) and m["lo"] > 0 and m["p"] == pytest.approx(0.03857, abs=1e-5)
    assert mcnemar(0, 0, 5) == {"diff": 0.0, "lo": 0.0, "hi": 0.0, "p": 1.0}


# --- claim 3: cliff incidence and peak timing -------------------------------------------------------------------
def test_cliff_incidence_recovers_planted_effect(planted, null):
    overall = planted["cliff_incidence"].set_index("workflow").loc["all"]
    assert overall["n_pairs"] == 42 and overall["diff_incidence"] > 0.4
    assert _excludes_zero(overall["diff_incidence_lo"], overall["diff_incidence_hi"], +1)
    assert overall["p_mcnemar"] < 0.001
    # planted: Isolated peaks 15 steps earlier
    assert _excludes_zero(overall["diff_peak_step_lo"], overall["diff_peak_step_hi"], -1)
    assert overall["diff_peak_step_lo"] <= -15 + 5 and overall["diff_peak_step_hi"] >= -15 - 5
    none = null["cliff_incidence"].set_index("workflow").loc["all"]
    assert _includes_zero(none["diff_incidence_lo"], none["diff_incidence_hi"])
    assert _includes_zero(none["diff_peak_step_lo"], none["diff_peak_step_hi"])


def test_cliff_incidence_pairs_by_variant(planted):
    t = planted["cliff_incidence"]
    cells = t[t["task"] != "all"]
    assert set(cells["variant"]) == {"", "a2", "a4", "a6"}  # a plain run's variant is ""
    assert (cells["n_pairs"] == 6).all()


# --- claim 4: failure signatures as rates over every eval episode ----------------------------------------------
def test_signature_rates_recover_planted_effect(planted, null):
    invert = {s.signature: s.invert for s in RATES}
    measured = planted["signature_rates"][planted["signature_rates"]["note"] == ""]
    assert len(measured) == 7  # accepts, rejects, same slot, identical votes, parse failures x 3 workflows
    for r in measured.itertuples():
        shared, isolated = PLANTED.rates[r.column]
        sign = (1 if isolated > shared else -1) * (-1 if invert[r.signature] else 1)
        assert sign * r.diff > 0, r
        assert _excludes_zero(r.diff_lo, r.diff_hi, sign) and _excludes_zero(r.diff_runs_lo, r.diff_runs_hi, sign), r
        # every eval episode counts: 200 per eval x 3 terminal evals x 6 runs per cell (x 1.5 rounds for accepts)
        assert r.episodes_shared == 200 * 3 * r.runs_shared * (1.5 if r.column == "evaluator_accept_rate" else 1)
        assert r.rate_shared_lo < r.rate_shared < r.rate_shared_hi
    for r in null["signature_rates"][null["signature_rates"]["note"] == ""].itertuples():
        assert _includes_zero(r.diff_lo, r.diff_hi) and _includes_zero(r.diff_runs_lo, r.diff_runs_hi), r


def test_signature_rates_say_what_the_trainer_does_not_log(planted):
    notes = planted["signature_rates"].set_index("signature")["note"]
    assert notes["orchestrator_stops_decomposing"].startswith("not measured: eval.parquet has no single_subtask_rate")
    assert "sampled episodes" in notes["aggregator_ignores_majority"]


# --- claim 5: amplification against parallel agents -------------------------------------------------------------
def test_amplification_dose_recovers_planted_effect(planted, null):
    t = planted["amplification_dose"]
    slopes = t[t["statistic"] == "slope"].set_index(["workflow", "policy"])
    for wf in ("voting", "orch_workers"):
        d = slopes.loc[(wf, "isolated - shared")]
        assert d["estimate"] == pytest.approx(PLANTED.amp_slope[1] - PLANTED.amp_slope[0], abs=0.08)
        assert _excludes_zero(d["lo"], d["hi"], +1)
        assert _includes_zero(slopes.loc[(wf, "shared"), "lo"], slopes.loc[(wf, "shared"), "hi"])
    corr = t[t["statistic"] == "corr_drop"].set_index(["workflow", "policy"]).loc[("all", "all")]
    assert _excludes_zero(corr["lo"], corr["hi"], +1)
    n = null["amplification_dose"]
    for r in n[
        n["statistic"].isin(["slope", "corr_drop"]) & (n["policy"].isin(["isolated - shared", "all"]))
    ].itertuples():
        assert _includes_zero(r.lo, r.hi), r


def test_amplification_degrades_without_per_agent_columns(tmp_path):
    """A sweep without per-agent gradients (training.agent_gradients off): a note row, not a crash; n_agents from config.json."""
    dirs = []
    for policy in ("shared", "isolated"):
        for seed in range(3):
            run = f"voting-math-qwen3-0.6b-{policy}-s{seed}"
            write_synthetic_run(tmp_path / run, run, steps=20, seed=seed, workflow_params={"n_votes": 5})
            dirs.append(tmp_path / run)
    parts = summarize_runs(dirs, AnalysisSettings())
    summary = add_single_baseline(parts["runs"])
    assert (summary["n_agents"] == 5).all() and (summary["n_agents_source"] == "config.json").all()
    assert (summary["variant"] == "").all()
    tables = claim_tables(summary, parts["curves"], terminal_k=3, n_boot=50, seed=0)
    amp = tables["amplification_dose"]
    assert len(amp) == 1 and amp["note"].iloc[0].startswith("not measured: train.parquet has no amplification_index")
    assert set(tables) == set(CLAIM_TABLES)


def test_n_agents_read_from_train_parquet(tmp_path):
    """train.parquet's n_agents (what ran) wins over the configured number."""
    out = tmp_path / "runs"
    dirs = planted_sweep(out, PLANTED, seeds=1)
    d = next(p for p in dirs if p.name.startswith("voting") and p.name.endswith("-a4"))
    cfg = json.loads((d / rundir.CONFIG_JSON).read_text())
    cfg["workflow_params"]["n_votes"] = 9
    rundir.write_json_atomic(cfg, d / rundir.CONFIG_JSON)
    assert "n_agents" in pq.read_schema(d / rundir.TRAIN_PARQUET).names
    runs = summarize_runs([d], AnalysisSettings())["runs"]
    assert runs["n_agents"].iloc[0] == 4 and runs["n_agents_source"].iloc[0] == "train.parquet"
    assert runs["variant"].iloc[0] == "a4" and not math.isnan(runs["amplification_index"].iloc[0])


# --- claim 6: capture and its onset against the cliff ------------------------------------------------------------
def test_capture_onset_recovers_planted_effect(planted, null):
    overall = planted["capture_onset"].set_index("workflow").loc["all"]
    assert overall["capture_lead"] == pytest.approx(PLANTED.capture_lead, abs=6)
    assert _excludes_zero(overall["capture_lead_lo"], overall["capture_lead_hi"], +1)
    assert overall["capture_index"] == pytest.approx(0.85, abs=0.01)
    none = null["capture_onset"].set_index("workflow").loc["all"]
    assert none["n_captured_cliffs"] >= 10
    assert _includes_zero(none["capture_lead_lo"], none["capture_lead_hi"])


# --- wiring ------------------------------------------------------------------------------------------------------
def test_every_claim_has_a_table_and_a_figure_in_the_report():
    from pathlib import Path

    report = Path(__file__).resolve().parents[1] / "rules" / "report"
    page = (Path(__file__).resolve().parents[1] / "docs" / "evaluation.md").read_text()
    for claim, (table, figure) in CLAIMS.items():
        assert table in TABLES and figure in FIGURES, claim
        assert (report / f"table_{table}.rst").exists() and (report / f"{figure}.rst").exists(), claim
        assert claim in page, f"docs/evaluation.md does not list claim {claim}"
