"""The question tables on summaries with known answers."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from analysis import tables


def planted_summary(noise: float = 0.0) -> pd.DataFrame:
    """Gains = 0.1 (voting) / 0.0 (eval_opt) + 0.05 (isolated); terminal = peak - 0.02; math and code alike."""
    rng = np.random.default_rng(0)
    rows = []
    for wf, task, scale, policy, seed in itertools.product(
        ["eval_opt", "voting"], ["math", "code"], ["a", "b"], ["shared", "isolated"], [0, 1, 2]
    ):
        gain = (0.1 if wf == "voting" else 0.0) + (0.05 if policy == "isolated" else 0.0) + noise * rng.normal()
        rows.append(
            {
                "run": f"{wf}-{task}-{scale}-{policy}-s{seed}",
                "workflow": wf,
                "task": task,
                "scale": scale,
                "policy": policy,
                "seed": seed,
                "split": "main",
                "primary": True,
                "base_acc": 0.3,
                "peak_acc": 0.3 + gain,
                "terminal_acc": 0.28 + gain,
                "gain_peak": gain,
                "gain_terminal": gain - 0.02,
            }
        )
    return pd.DataFrame(rows)


def test_variance_decomposition_credits_the_planted_factors():
    var = tables.variance_decomposition(planted_summary()).set_index("term")
    share = var["gain_peak_share"]
    total = 0.1**2 + 0.05**2  # balanced design: SS shares are the squared effects' proportions
    assert abs(share["workflow"] - 0.1**2 / total) < 1e-9
    assert abs(share["policy"] - 0.05**2 / total) < 1e-9
    assert share.drop(["workflow", "policy"]).abs().max() < 1e-9
    assert (
        abs(share.sum() - 1) < 1e-9 and var.loc["workflow", "df"] == 1 and var.loc["residual", "df"] == 48 - 11
    )  # intercept, 4 mains, 6 pairs


def test_isolated_vs_shared_pairs_by_seed_with_seeded_intervals():
    summary = planted_summary(noise=0.01)
    a = tables.isolated_vs_shared(summary, n_boot=500, seed=3)
    b = tables.isolated_vs_shared(summary, n_boot=500, seed=3)
    pd.testing.assert_frame_equal(a, b)
    overall = a[a["workflow"] == "all"].iloc[0]
    assert overall["n_pairs"] == 24 and abs(overall["diff_peak"] - 0.05) < 0.01
    assert overall["diff_peak_lo"] < overall["diff_peak"] < overall["diff_peak_hi"]
    assert len(a) == 2 * 2 * 2 + 1 and (a["n_pairs"][:-1] == 3).all()
    exact = tables.isolated_vs_shared(planted_summary(), n_boot=200)
    assert np.allclose(exact["diff_terminal"], 0.05) and np.allclose(exact["diff_terminal_lo"], 0.05)


def test_improves_on_base_shares():
    imp = tables.improves_on_base(planted_summary()).set_index(["group", "value"])
    # eval_opt shared gains 0 (not an improvement); eval_opt isolated 0.05 > 0; voting always > 0
    assert imp.loc[("all", "all"), "n_cells"] == 16
    assert imp.loc[("all", "all"), "share_peak_improves"] == 0.75
    assert imp.loc[("workflow", "eval_opt"), "share_peak_improves"] == 0.5
    # terminal = peak - 0.02: eval_opt shared is below base, eval_opt isolated 0.03 above
    assert imp.loc[("policy", "shared"), "share_terminal_improves"] == 0.5
    assert imp["share_peak_beyond_noise"].isna().all()  # no noise floor in this summary: unknown, not "no"


def test_beyond_noise_needs_the_gain_to_clear_two_standard_errors():
    summary = planted_summary()
    summary["gain_noise"] = 0.07  # e.g. base 0.5 on 200 problems: 2 * sqrt(0.25 / 200)
    imp = tables.improves_on_base(summary).set_index(["group", "value"])
    # peak gains: 0 and 0.05 (eval_opt) do not clear 0.07; 0.1 and 0.15 (voting) do
    assert imp.loc[("all", "all"), "share_peak_improves"] == 0.75
    assert imp.loc[("all", "all"), "share_peak_beyond_noise"] == 0.5
    assert imp.loc[("workflow", "voting"), "share_peak_beyond_noise"] == 1.0
    # terminal = peak - 0.02: voting shared 0.08 clears 0.07, so the same
    assert imp.loc[("workflow", "voting"), "share_terminal_beyond_noise"] == 1.0
    summary.loc[summary["workflow"] == "voting", "gain_noise"] = 0.09
    imp = tables.improves_on_base(summary).set_index(["group", "value"])
    assert imp.loc[("workflow", "voting"), "share_terminal_beyond_noise"] == 0.5  # only isolated's 0.13


def test_cell_table_says_which_cells_beat_base_beyond_noise():
    from analysis.summary import aggregate_seeds

    summary = planted_summary()
    summary["gain_noise"] = 0.07
    summary["cliff"] = False
    cells = tables.cell_table(summary, aggregate_seeds(summary)).set_index(["workflow", "task", "scale", "policy"])
    assert (cells["gain_noise"] == 0.07).all()
    assert cells.loc[("voting", "math", "a", "shared"), "peak_beats_base"] == "yes"  # 0.10 > 0.07
    assert cells.loc[("eval_opt", "math", "a", "isolated"), "peak_beats_base"] == "no"  # 0.05 < 0.07
    assert cells.loc[("voting", "code", "b", "shared"), "terminal_beats_base"] == "yes"  # 0.08 > 0.07


def test_write_table_formats(tmp_path):
    df = pd.DataFrame({"a": [1.23456, np.nan], "b": ["x", "y"]})
    paths = tables.write_table(df, tmp_path / "t", ("csv", "md", "html", "tex"))
    assert [p.suffix for p in paths] == [".csv", ".md", ".html", ".tex"]
    assert "1.235" in (tmp_path / "t.md").read_text() and "\\begin{tabular}" in (tmp_path / "t.tex").read_text()
