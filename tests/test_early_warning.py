"""Early-warning detectors (trainer/early_warning.py): each fires on a planted signal at the planted
step and stays silent on a planted flat run; warnings.parquet has the contract's columns."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from trainer import early_warning as ew
from trainer.contract import rundir

STEPS = 40
ONSET = 25


def flat_run(policy: str = "shared", seed: int = 0) -> pd.DataFrame:
    """Two roles, every signal flat with a little noise: nothing should fire."""
    rng = np.random.default_rng(seed)
    rows = []
    for step in range(1, STEPS + 1):
        for role, share in (("generator", 0.5), ("aggregator", 0.5)):
            rows.append(
                {
                    "step": step,
                    "role": role,
                    "policy": policy if policy == "shared" else role,
                    "entropy": 2.0 + 0.05 * rng.standard_normal(),
                    "grad_norm": 1.0 + 0.1 * rng.random(),
                    "grad_sq_share": share + 0.02 * rng.standard_normal(),
                    "zero_var_group_share": 0.3 + 0.05 * rng.random(),
                    "amplification_index": 1.2 + 0.05 * rng.random(),
                    "logp_mismatch": 0.05 + 0.01 * rng.random(),
                    "completion_len_mean": 20.0 + rng.random(),
                    "reward_mean": 0.5 + 0.02 * rng.standard_normal(),
                    "clip_ratio": 0.01 + 0.005 * rng.random(),
                    "kl": 0.02 + 0.01 * rng.random(),
                    "skipped": False,
                }
            )
    return pd.DataFrame(rows)


def plant(
    df: pd.DataFrame, column: str, value: float, role: str = "generator", only_onset: bool = False
) -> pd.DataFrame:
    """Set `column` of `role` to `value` from step ONSET on (or at ONSET only: a spike)."""
    df = df.copy()
    at = (df["role"] == role) & ((df["step"] == ONSET) if only_onset else (df["step"] >= ONSET))
    df.loc[at, column] = value
    return df


@pytest.mark.parametrize("policy", ["shared", "isolated"])
def test_flat_run_is_silent(policy):
    assert ew.warnings_from_train(flat_run(policy)).empty


PLANTS = [  # detector, {column: planted value}, spike only
    # entropy collapsing while reward rises (reward bought: entropy_reward stays silent)
    ("entropy_collapse", {"entropy": 0.2, "reward_mean": 1.0}, False),
    ("advantage_collapse", {"zero_var_group_share": 1.0}, False),
    ("grad_norm_spike", {"grad_norm": 20.0}, True),
    ("capture", {"grad_sq_share": 0.95}, False),
    ("amplification", {"amplification_index": 4.0}, False),
    ("train_inference_mismatch", {"logp_mismatch": 2.0}, False),
    ("length_surge", {"completion_len_mean": 60.0}, False),
    ("entropy_reward", {"entropy": 0.9}, False),  # entropy spent (to 45% of its baseline), no reward bought
    ("reward_drop", {"reward_mean": 0.1}, False),
    ("clip_ratio", {"clip_ratio": 0.5}, False),
    ("kl", {"kl": 2.0}, False),
]


@pytest.mark.parametrize("detector,values,spike", PLANTS)
def test_each_detector_fires_on_its_planted_signal(detector, values, spike):
    df = flat_run()
    for column, value in values.items():
        df = plant(df, column, value, only_onset=spike)
    found = ew.warnings_from_train(df)
    assert list(found["detector"]) == [detector], found
    row = found.iloc[0]
    assert row["role"] == "generator"
    # within the trailing window of the onset, never before it
    assert ONSET <= row["step"] < ONSET + ew.DEFAULT_THRESHOLDS["window"]
    assert row["threshold"] == ew.DEFAULT_THRESHOLDS[ew.BY_NAME[detector].threshold_key]
    assert row["version"] == ew.DETECTOR_VERSIONS[detector]


def test_combined_fires_where_k_of_its_detectors_fire_within_its_window():
    """A length surge at ONSET and a gradient spike 3 steps later: each alone, and two of `combine` within
    combine_window steps at the spike."""
    df = plant(plant(flat_run(), "completion_len_mean", 60.0), "grad_norm", 20.0, only_onset=False)
    df.loc[(df["role"] == "generator") & (df["step"] != ONSET + 3), "grad_norm"] = 1.0
    found = ew.warnings_from_train(df)
    first = found.groupby("detector")["step"].min().to_dict()
    assert first["length_surge"] == ONSET and first["grad_norm_spike"] == ONSET + 3
    assert first["combined"] == ONSET + 3 and found.set_index("detector").loc["combined", "value"] == 2
    assert ew.warnings_from_train(df, {"combine_k": 3}).query("detector == 'combined'").empty
    assert ew.warnings_from_train(df, {"combine": ["length_surge"]}).query("detector == 'combined'").empty


def test_capture_is_silent_on_isolated_policies():
    assert ew.warnings_from_train(plant(flat_run("isolated"), "grad_sq_share", 1.0)).empty


def test_absent_columns_silence_their_detectors():
    df = plant(flat_run(), "entropy", 0.2)
    # without reward_mean, entropy_reward cannot see the entropy spent; combined then counts one detector
    df = df.drop(columns=["amplification_index", "logp_mismatch", "reward_mean"])
    assert list(ew.warnings_from_train(df)["detector"]) == ["entropy_collapse"]


def test_thresholds_come_from_config_and_unknown_keys_are_errors():
    df = plant(flat_run(), "grad_sq_share", 0.7)
    assert list(ew.warnings_from_train(df, ew.thresholds_of({}))["detector"]) == ["capture"]
    assert ew.warnings_from_train(df, ew.thresholds_of({"early_warning": {"capture_share": 0.8}})).empty
    with pytest.raises(ValueError, match="training.early_warning.capture_shares: unknown key"):
        ew.thresholds_of({"early_warning": {"capture_shares": 0.8}})
    with pytest.raises(ValueError, match="training.early_warning.combine: unknown detector"):
        ew.thresholds_of({"early_warning": {"combine": ["entropy_collapse", "vibes"]}})


def test_online_warnings_at_each_step_equal_the_offline_ones():
    df = plant(flat_run(), "entropy", 0.2)
    rows = df.to_dict("records")
    online = [
        w
        for s in range(1, STEPS + 1)
        for w in ew.warnings_at([r for r in rows if r["step"] <= s], s, ew.DEFAULT_THRESHOLDS)
    ]
    assert pd.DataFrame(online).equals(ew.warnings_from_train(df))


def test_zero_variance_share_counts_groups_whose_rewards_agree():
    assert ew.zero_variance_share({0: [1.0, 1.0], 1: [0.0, 1.0], 2: [0.0, 0.0], 3: [1.0]}) == pytest.approx(2 / 3)
    assert np.isnan(ew.zero_variance_share({0: [1.0]}))


def test_warnings_table_has_the_contract_columns():
    table = rundir.to_table(ew.warnings_from_train(plant(flat_run(), "kl", 2.0)), rundir.WARNINGS_SCHEMA)
    assert table.schema.names[:5] == ["step", "role", "detector", "value", "threshold"]
    assert table.num_rows == 1


def test_warnings_judged_against_cliffs():
    from analysis.warnings_judged import judge

    def w(*pairs):
        return pd.DataFrame(
            [{"step": s, "role": "generator", "detector": d, "value": 1.0, "threshold": 0.5} for d, s in pairs],
            columns=["step", "role", "detector", "value", "threshold"],
        )

    runs = [
        {"cliff_step": 100.0, "warnings": w(("capture", 60), ("capture", 90), ("grad_norm_spike", 120))},
        {"cliff_step": 50.0, "warnings": w(("capture", 30))},
        {"cliff_step": 80.0, "warnings": w()},
        {"cliff_step": float("nan"), "warnings": w(("grad_norm_spike", 10))},
        {"cliff_step": float("nan"), "warnings": w()},
    ]
    table = judge(runs, ["capture", "grad_norm_spike"]).set_index("detector")
    assert table.loc["capture"].to_dict() == {
        "runs_cliff": 3,
        "warned_before_cliff": 2,
        "hit_rate": 2 / 3,
        "median_lead_steps": 30.0,
        "runs_no_cliff": 2,
        "false_alarms": 0,
        "false_alarm_rate": 0.0,
    }
    spike = table.loc["grad_norm_spike"]
    assert spike["warned_before_cliff"] == 0 and np.isnan(spike["median_lead_steps"])  # fired after the cliff
    assert spike["false_alarms"] == 1 and spike["false_alarm_rate"] == 0.5


def test_planted_runs_judged_end_to_end(tmp_path):
    """benchmarks/bench_warnings.py: the trainer's detectors on planted runs, judged against their cliffs."""
    from tests.planted_warnings import judged_planted_runs

    table, n = judged_planted_runs(tmp_path, steps=200, seeds=1)
    table = table.set_index("detector")
    assert n == 12 and list(table.index) == list(rundir.EARLY_WARNING_DETECTORS)
    assert (table["runs_cliff"] + table["runs_no_cliff"] == n).all() and table["runs_cliff"].iloc[0] > 0
    # only Shared capture is planted ahead of the cliffs; nothing planted, nothing fires
    assert table.loc["capture", "false_alarms"] + table.loc["capture", "warned_before_cliff"] > 0
    assert table.drop(index="capture")[["warned_before_cliff", "false_alarms"]].to_numpy().sum() == 0
    assert (tmp_path / "voting-math-qwen3-0.6b-shared-s0" / rundir.WARNINGS_PARQUET).exists()


def test_analyse_writes_the_early_warning_table_and_figure(tmp_path):
    """analyse: results/tables/early_warnings and analysis/warnings.parquet (first onsets beside the cliff);
    render_all draws the early_warnings figure from them."""
    import io

    from analysis.analyse import analyse
    from analysis.curves import DEFINITION_VERSIONS
    from analysis.figures import render_all
    from analysis.settings import AnalysisSettings
    from tests.planted_warnings import judged_planted_runs

    judged_planted_runs(tmp_path / "runs", steps=120, seeds=1)
    dirs = sorted((tmp_path / "runs").iterdir())
    analyse(dirs, [d.name for d in dirs], AnalysisSettings(), tmp_path / "res", log=io.StringIO())
    table = pd.read_csv(tmp_path / "res" / "tables" / "early_warnings.csv")
    assert list(table["detector"]) == list(rundir.EARLY_WARNING_DETECTORS)
    assert (table["runs_cliff"] + table["runs_no_cliff"] == len(dirs)).all()
    summary = pd.read_parquet(tmp_path / "res" / "summary.parquet")  # each definition's version, per run
    for name, version in DEFINITION_VERSIONS.items():
        assert (summary[f"{name}_version"] == version).all()
    onsets = pd.read_parquet(tmp_path / "res" / "analysis" / "warnings.parquet")
    assert len(onsets) and set(onsets["detector"]) <= set(rundir.EARLY_WARNING_DETECTORS)
    assert not onsets.duplicated(["run", "detector"]).any()
    render_all(tmp_path / "res", tmp_path / "fig", log=io.StringIO())
    assert (tmp_path / "fig" / "early_warnings.png").stat().st_size > 5000
