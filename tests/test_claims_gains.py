"""Claims 1 and 2 (analysis/claim_base_gain.py, claim_gain_factors.py) on planted sweeps (tests/planted_gains.py):
each recovers its planted effect near the planted value with an interval that excludes zero, and with nothing
planted its interval includes zero; their interval statistics against reference values."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pandas as pd
import pytest

from analysis.anova import nested_bases, sequential_ss, term_blocks
from analysis.claim_base_gain import PEAK_NOTE, base_gain
from analysis.claim_gain_factors import CLAIM, NO_SPREAD, ONE_SEED, POLICY, SETTING_TERMS, gain_factors
from analysis.claims import claim_tables
from analysis.intervals import resample_within, t_mean_ci, t_quantile
from analysis.names import CLAIM_TABLES, CLAIMS
from analysis.per_run import summarize_runs
from analysis.settings import AnalysisSettings
from analysis.summary import add_single_baseline
from tests.planted_gains import NULL, PLANTED, gain_summary, gain_sweep, planted_mean_gain, planted_shares

SEEDS = 4


def _tables(out, gains) -> dict[str, pd.DataFrame]:
    parts = summarize_runs(gain_sweep(out, gains, seeds=SEEDS), AnalysisSettings())
    assert not len(parts["problems"]), parts["problems"]
    return claim_tables(add_single_baseline(parts["runs"]), parts["curves"], terminal_k=3, n_boot=1000, seed=0)


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> dict[str, pd.DataFrame]:
    return _tables(tmp_path_factory.mktemp("gains_planted"), PLANTED)


@pytest.fixture(scope="module")
def null(tmp_path_factory) -> dict[str, pd.DataFrame]:
    return _tables(tmp_path_factory.mktemp("gains_null"), NULL)


def _overall(t: pd.DataFrame, measure: str, statistic: str) -> pd.Series:
    rows = t[(t["measure"] == measure) & (t["statistic"] == statistic) & (t["workflow"] == "all")]
    assert len(rows) == 1, (measure, statistic)
    return rows.iloc[0]


def _factor(t: pd.DataFrame, measure: str, term: str) -> pd.Series:
    return t[(t["measure"] == measure) & (t["term"] == term)].iloc[0]


# --- claim 1: gains over the base, per cell with seed intervals ---------------------------------------------------
def test_base_gain_recovers_planted_gains(planted):
    t = planted["base_gain"]
    for measure, vs_single in (("gain_terminal", False), ("gain_vs_single_terminal", True)):
        mean = _overall(t, measure, "mean_gain")
        assert mean["estimate"] == pytest.approx(planted_mean_gain(PLANTED, vs_single), abs=0.006), measure
        assert mean["lo"] > 0 and mean["lo"] < mean["estimate"] < mean["hi"], measure
    share = _overall(t, "gain_terminal", "share_above_zero")
    assert share["n"] == 24 and share["estimate"] == 1.0 and share["lo"] > 0.8  # every planted gain is >= 0.05
    cells = t[(t["statistic"] == "cell_gain") & (t["measure"] == "gain_terminal")]
    assert len(cells) == 24 + 4 and (cells["n"] == SEEDS).all()  # 24 multi-agent cells and 4 single-agent ones
    assert len(t[(t["statistic"] == "cell_gain") & (t["measure"] == "gain_vs_single_terminal")]) == 24
    assert (t.loc[t["measure"] == "gain_peak", "note"] == PEAK_NOTE).all()


def test_base_gain_null_intervals_include_zero(null):
    t = null["base_gain"]
    for measure in ("gain_terminal", "gain_vs_single_terminal", "gain_vs_single_peak"):
        mean = _overall(t, measure, "mean_gain")
        assert mean["lo"] <= 0 <= mean["hi"], measure
    # a cell's 95% interval lies above zero by chance 2.5% of the time (cells compared with the same single-agent
    # runs rise and fall together: their share's Wilson interval, which counts cells as independent, is too narrow)
    share = _overall(t, "gain_terminal", "share_above_zero")
    assert share["lo"] <= 0.025 <= share["hi"]


def test_peak_gain_is_above_zero_under_eval_noise_alone(null):
    """The peak is a maximum over evals: with no gain planted, eval noise alone lifts it over the step-0 eval (the
    table's note says so; the claim rests on the terminal gain and the gains over the single agent)."""
    mean = _overall(null["base_gain"], "gain_peak", "mean_gain")
    assert mean["lo"] > 0 and mean["note"] == PEAK_NOTE


# --- claim 2: the gains' variance, workflow x task x scale against policy ---------------------------------------
def test_gain_factors_recover_planted_shares(planted):
    t, shares = planted["gain_factors"], planted_shares(PLANTED)
    claim = _factor(t, "gain_terminal", CLAIM)
    assert claim["estimate"] == pytest.approx(shares["setting"] - shares["policy"], abs=0.08)
    assert claim["lo"] > 0.5 and claim["lo"] < claim["estimate"] < claim["hi"]
    assert _factor(t, "gain_terminal", SETTING_TERMS)["estimate"] == pytest.approx(shares["setting"], abs=0.08)
    policy = _factor(t, "gain_terminal", POLICY)
    assert policy["lo"] <= shares["policy"] <= policy["hi"]
    terms = t[(t["measure"] == "gain_terminal") & (t["kind"] == "term")].set_index("term")
    assert terms["estimate"].idxmax() == "workflow x task"  # the planted interaction
    assert terms.loc["workflow x task", "df"] == 2 and len(terms) == 15  # every term of 4 factors
    assert _factor(t, "gain_peak", CLAIM)["lo"] > 0.5


def test_gain_factors_null_intervals_include_zero(null):
    t = null["gain_factors"]
    for measure in ("gain_terminal", "gain_peak"):
        for term in (CLAIM, SETTING_TERMS, POLICY):
            row = _factor(t, measure, term)
            assert row["lo"] <= 0 <= row["hi"], (measure, term)


def test_gain_factors_say_when_policy_sets_the_gain():
    """Gains set by the policy alone: the claim's difference is below zero, its interval too."""
    by_policy = dataclasses.replace(NULL, isolated=0.05)
    t = gain_factors(gain_summary(by_policy, SEEDS, np.random.default_rng(0)), n_boot=500)
    claim, shares = _factor(t, "gain_terminal", CLAIM), planted_shares(by_policy)
    assert claim["hi"] < 0 and claim["estimate"] == pytest.approx(-shares["policy"], abs=0.08)


def test_one_seed_per_cell_has_no_intervals_and_says_why():
    summary = gain_summary(PLANTED, 1, np.random.default_rng(0))
    t = gain_factors(summary, n_boot=100)
    assert (t["note"] == ONE_SEED).all() and t["lo"].isna().all()
    b = base_gain(summary, n_boot=100)
    assert b.loc[b["statistic"] == "cell_gain", "lo"].isna().all()
    assert b.loc[b["statistic"] == "mean_gain", "lo"].isna().all()


def test_empty_summary_gives_empty_tables():
    empty = pd.DataFrame()
    assert not len(base_gain(empty)) and not len(gain_factors(empty))


# --- the statistics ----------------------------------------------------------------------------------------------
def test_t_interval_matches_reference_values():
    """R: qt(0.975, df) and t.test(1:4)$conf.int."""
    for df, q in ((1, 12.7062), (2, 4.3027), (4, 2.7764), (30, 2.0423)):
        assert t_quantile(0.975, df) == pytest.approx(q, abs=1e-4)
    assert t_quantile(0.025, 3) == pytest.approx(-3.1824, abs=1e-4)
    assert t_mean_ci(np.array([1.0, 2, 3, 4])) == pytest.approx((0.4457, 4.5543), abs=1e-4)
    assert np.isnan(t_mean_ci(np.array([1.0]))[0])


def test_resample_within_keeps_strata_and_their_unbiased_spread():
    values, strata = np.array([0.0, 1.0, 5.0, 7.0, 9.0]), np.array([0, 0, 1, 1, 2])
    draws = resample_within(values, strata, np.random.default_rng(0), 4000)
    # a stratum of two draws its values' deviations from their mean scaled by sqrt(2): 0.5 -+ 0.707
    assert set(np.round(draws[:, 0], 6)) == {round(0.5 - 0.5 * 2**0.5, 6), round(0.5 + 0.5 * 2**0.5, 6)}
    assert set(np.round(draws[:, 3], 6)) <= {round(6 - 2**0.5, 6), round(6 + 2**0.5, 6)}
    assert (draws[:, 4] == 9.0).all()  # one value: nothing to resample
    # the mean of a resampled stratum varies as the sample mean does: s^2 / m = 0.5 / 2
    assert draws[:, :2].mean(axis=1).var() == pytest.approx(0.25, rel=0.1)


def test_sequential_ss_stacks_responses_and_adds_up():
    rows = pd.DataFrame(list(itertools.product("ab", "xyz", range(3))), columns=["f", "g", "seed"])
    nested = nested_bases([b for _, b in term_blocks(rows, ["f", "g"], 2)], len(rows))
    assert nested.df == [1, 2, 2] and nested.df_residual == 18 - 6
    y = np.random.default_rng(0).normal(size=(3, len(rows)))
    ss, rss, total = sequential_ss(nested, y)
    for i in range(3):
        one = sequential_ss(nested, y[i])
        assert np.allclose(one[0], ss[i]) and one[1] == pytest.approx(rss[i])
    assert np.allclose(ss.sum(axis=1) + rss, total)


def test_six_claims_each_with_a_table():
    assert len(CLAIMS) == 6 and list(CLAIMS)[:2] == [
        "multi_agent_rl_improves_on_base",
        "gains_depend_on_workflow_task_scale_more_than_policy",
    ]
    assert set(claim_tables(pd.DataFrame(), pd.DataFrame(), terminal_k=3, n_boot=10, seed=0)) == set(CLAIM_TABLES)


def test_gains_that_do_not_vary_say_so():
    flat = dataclasses.replace(NULL, seed_sd=0.0, eval_sd=0.0)
    t = gain_factors(gain_summary(flat, 2, np.random.default_rng(0)), n_boot=50)
    assert list(t["term"]) == ["residual", "residual"] and (t["note"] == NO_SPREAD).all()
