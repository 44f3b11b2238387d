"""Variants: named config deltas of a matrix (`matrices.<m>.variants`), an optional sixth axis.

Shown here: the run id with and without its variant suffix; the expansion (plain runs once, each variant's
runs, a workflow-knob delta only on its workflow); a variant run's resolved config carries its delta and a
plain run's config and hash are what main (a352704) made; a bad delta fails naming matrix, variant and key;
and `snakemake -n --profile slurm --config matrix=paper_ablations` lists every ablation run once.
"""

from __future__ import annotations

import copy
import io
import json
import re
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.workflow import ROOT, snakemake, train_runs
from trainer.contract.config import ConfigError, config_hash
from trainer.contract.runid import RUN_ID_PATTERN, RunId, parse_run_id
from trainer.sweep.config import expand_matrix, load_config, load_yaml, resolve_run_config, validate_config

DATA = Path(__file__).parent / "data"
SCHEMA = load_yaml(ROOT / "rules" / "config.schema.yaml")
VARIANT_RUNS = {"per_role": 24, "episode_groups": 36, "votes2": 12, "votes5": 12, "subtasks1": 12, "subtasks5": 12}


@pytest.fixture(scope="module")
def config() -> dict:
    return load_config(ROOT / "config.yaml", ROOT / "rules" / "config.schema.yaml")


def ablations(config: dict) -> dict:
    """The config with paper_ablations in use."""
    return {**copy.deepcopy(config), "matrix": "paper_ablations"}


@pytest.mark.parametrize(
    "text, scale, seed, variant",
    [
        ("voting-math-qwen3-0.6b-shared-s0", "qwen3-0.6b", 0, None),
        ("voting-math-qwen3-1.7b-isolated-s2-votes5", "qwen3-1.7b", 2, "votes5"),
        ("orch_workers-code-tiny-study-shared-s10-per_role", "tiny-study", 10, "per_role"),
    ],
)
def test_run_id_round_trip_with_and_without_variant(text, scale, seed, variant):
    run = parse_run_id(text)
    assert (run.scale, run.seed, run.variant) == (scale, seed, variant) and str(run) == text
    assert parse_run_id(str(RunId(run.workflow, run.task, scale, run.policy, seed, variant))) == run
    assert ("variant" in run.axes()) == (variant is not None)
    assert re.fullmatch(RUN_ID_PATTERN, text)


@pytest.mark.parametrize(
    "text",
    [
        "voting-math-tiny-shared-s0-",
        "voting-math-tiny-shared-s0-Votes",
        "voting-math-tiny-shared-s0-a-b",
        "voting-math-tiny-shared-s0-5x",
    ],
)
def test_bad_variant_suffix_does_not_parse(text):
    with pytest.raises(ValueError, match="bad run id"):
        parse_run_id(text)


def test_plain_runs_sort_before_their_variants():
    runs = [RunId("voting", "math", "tiny", "shared", 0, "votes5"), RunId("voting", "math", "tiny", "shared", 0)]
    assert [r.variant for r in sorted(runs)] == [None, "votes5"]


def test_paper_run_ids_are_unchanged(config):
    """The 126 ids captured from main before variants existed (tests/data/paper_run_ids.txt)."""
    expected = (DATA / "paper_run_ids.txt").read_text().split()
    assert len(expected) == 126
    assert [str(r) for r in expand_matrix(config, "paper")] == expected


def test_plain_configs_and_hashes_are_unchanged(config):
    """Every plain run of paper, demo and warnings_study resolves to its recorded config hash
    (tests/data/plain_config_hashes.json), and its config has no `variant` key. The fixture is re-captured, by this
    loop, whenever a setting in the hash changes on purpose (the paper's eval settings and agent_gradients; the tiny
    base model, its warm start, agent_gradients on in the demo); the other hashes stay unchanged."""
    expected = json.loads((DATA / "plain_config_hashes.json").read_text())
    got = {}
    for matrix in ("paper", "demo", "warnings_study"):
        cfg = {**config, "matrix": matrix}
        for run in (r for r in expand_matrix(cfg) if r.variant is None):
            rc = resolve_run_config(cfg, run)
            assert "variant" not in rc
            got[str(run)] = config_hash(rc)
    assert got == expected


def test_ablations_expand_plain_runs_once_and_each_variant(config):
    runs = expand_matrix(ablations(config))
    assert len(runs) == len(set(runs)) == 42 + sum(VARIANT_RUNS.values())
    plain = [r for r in runs if r.variant is None]
    assert {str(r) for r in plain} <= set((DATA / "paper_run_ids.txt").read_text().split())  # the paper's own runs
    assert Counter(r.variant for r in runs if r.variant) == VARIANT_RUNS
    # a workflow knob multiplies only its workflow's runs; the single baseline gets no variants
    assert {r.workflow for r in runs if r.variant in ("votes2", "votes5")} == {"voting"}
    assert {r.workflow for r in runs if r.variant in ("subtasks1", "subtasks5")} == {"orch_workers"}
    assert not [r for r in runs if r.variant and r.workflow == "single"]


@pytest.mark.parametrize(
    "run, key, value",
    [
        ("voting-code-qwen3-1.7b-isolated-s1-votes5", ("workflow_params", "n_votes"), 5),
        ("voting-code-qwen3-1.7b-isolated-s1-votes2", ("workflow_params", "n_votes"), 2),
        ("orch_workers-math-qwen3-1.7b-shared-s0-subtasks1", ("workflow_params", "max_subtasks"), 1),
        ("eval_opt-math-qwen3-1.7b-shared-s2-per_role", ("training", "reward_mode"), "per_role"),
        ("orch_workers-code-qwen3-1.7b-isolated-s0-episode_groups", ("training", "advantage_grouping"), "episode"),
    ],
)
def test_variant_run_config_has_its_delta(config, run, key, value):
    cfg = ablations(config)
    variant_rc = resolve_run_config(cfg, parse_run_id(run))
    plain_rc = resolve_run_config(cfg, parse_run_id(run.rsplit("-", 1)[0]))
    assert variant_rc[key[0]][key[1]] == value != plain_rc[key[0]][key[1]]
    assert variant_rc["variant"] == run.rsplit("-", 1)[1] and variant_rc["run"] == run
    # nothing else moved: the delta only, applied after the overrides (orch_workers x math keeps its 3072 tokens)
    assert {k: v for k, v in variant_rc.items() if k not in ("run", "variant", key[0])} == {
        k: v for k, v in plain_rc.items() if k not in ("run", key[0])
    }
    assert {k: v for k, v in variant_rc[key[0]].items() if k != key[1]} == {
        k: v for k, v in plain_rc[key[0]].items() if k != key[1]
    }
    assert config_hash(variant_rc) != config_hash(plain_rc)


def test_delta_is_deep_merged_after_overrides(config):
    """A nested delta (training.lora.r) keeps the other LoRA keys; on tiny runs it wins over the tiny override."""
    cfg = copy.deepcopy(config)
    cfg["matrices"]["demo"]["variants"] = {"r4": {"training": {"lora": {"r": 4}, "learning_rate": 1.0e-3}}}
    validate_config(cfg, SCHEMA)
    rc = resolve_run_config(cfg, parse_run_id("voting-math-tiny-shared-s0-r4"))
    assert rc["training"]["lora"] == {"r": 4, "lora_alpha": 32, "lora_dropout": 0.0, "target_modules": "all-linear"}
    assert rc["training"]["learning_rate"] == 1.0e-3 and rc["training"]["max_steps"] == 15  # tiny override kept


@pytest.mark.parametrize(
    "variants, fragments",
    [
        (
            {"bad": {"training": {"reward_mod": "per_role"}}},
            ["matrices.demo.variants.bad.training.reward_mod: unknown key"],
        ),
        ({"bad": {"trainig": {"reward_mode": "per_role"}}}, ["matrices.demo.variants.bad.trainig: unknown key"]),
        (
            {"bad": {"workflows": {"voting": {"n_vote": 5}}}},
            ["matrices.demo.variants.bad.workflows.voting.n_vote: unknown key"],
        ),
        (
            {"bad": {"workflows": {"debate": {"n_votes": 5}}}},
            ["matrices.demo.variants.bad.workflows.debate", "'debate'"],
        ),
        ({"Bad-1": {"training": {"reward_mode": "per_role"}}}, ["matrices.demo.variants", "'Bad-1'"]),
        ({"bad": {}}, ["matrices.demo.variants.bad"]),
    ],
)
def test_bad_variant_fails_naming_matrix_variant_and_key(config, variants, fragments):
    cfg = copy.deepcopy(config)
    cfg["matrices"]["demo"]["variants"] = variants
    with pytest.raises(ConfigError) as e:
        validate_config(cfg, SCHEMA)
    assert all(f in str(e.value) for f in fragments), str(e.value)


def test_tables_group_by_variant(tmp_path):
    """Per cell and variant in the summary and the Isolated-vs-Shared table; plain tables keep no variant column."""
    from analysis.summary import add_single_baseline, aggregate_seeds
    from analysis.tables import isolated_vs_shared, write_table

    rows = []
    for variant, bump in (("", 0.0), ("votes5", 0.2)):
        for policy, acc in (("shared", 0.5), ("isolated", 0.6)):
            for seed in (0, 1):
                rows.append(
                    {
                        "run": f"voting-math-tiny-{policy}-s{seed}" + (f"-{variant}" if variant else ""),
                        "workflow": "voting",
                        "task": "math",
                        "scale": "tiny",
                        "policy": policy,
                        "seed": seed,
                        "variant": variant,
                        "split": "a",
                        "primary": True,
                        "base_acc": 0.4,
                        "peak_acc": acc + bump,
                        "terminal_acc": acc + bump,
                        "cliff": False,
                    }
                )
    for seed in (0, 1):
        rows.append(
            {
                "run": f"single-math-tiny-shared-s{seed}",
                "workflow": "single",
                "task": "math",
                "scale": "tiny",
                "policy": "shared",
                "seed": seed,
                "variant": "",
                "split": "a",
                "primary": True,
                "base_acc": 0.4,
                "peak_acc": 0.45,
                "terminal_acc": 0.45,
                "cliff": False,
            }
        )
    summary = add_single_baseline(pd.DataFrame(rows))
    agg = aggregate_seeds(summary).set_index(["workflow", "policy", "variant"])
    assert agg.loc[("voting", "shared", "votes5"), "peak_acc_mean"] == pytest.approx(0.7)
    assert agg.loc[("voting", "shared", ""), "peak_acc_mean"] == pytest.approx(0.5)
    assert agg.loc[("voting", "shared", "votes5"), "gain_vs_single_terminal_mean"] == pytest.approx(0.25)
    diff = isolated_vs_shared(summary, n_boot=10).set_index(["workflow", "variant"])
    assert diff.loc[("voting", "votes5"), "n_pairs"] == 2 and diff.loc[("all", ""), "n_pairs"] == 2
    assert "variant" in pd.read_csv(write_table(diff.reset_index(), tmp_path / "v", ("csv",))[0]).columns
    plain = isolated_vs_shared(summary[summary["variant"] == ""], n_boot=10)
    assert "variant" not in pd.read_csv(write_table(plain, tmp_path / "p", ("csv",))[0]).columns


def test_slurm_dry_run_lists_each_ablation_run_once(slurm_profile_installed):
    out = snakemake("-n", "--profile", "slurm", "--config", "matrix=paper_ablations").stdout
    runs = train_runs(out)
    assert set(runs.values()) == {1}
    assert Counter(parse_run_id(r).variant for r in runs if parse_run_id(r).variant) == VARIANT_RUNS
    assert len(runs) == 42 + sum(VARIANT_RUNS.values())
    assert "voting-math-qwen3-1.7b-isolated-s2-votes5" in runs and "voting-math-qwen3-1.7b-isolated-s2" in runs
    assert not [r for r in runs if r.startswith("eval_opt-") and r.endswith(("-votes5", "-subtasks1"))]


@pytest.mark.slow
def test_a_variant_run_of_a_tiny_matrix_runs_to_done(tmp_path_factory):
    """One variant run (voting with 2 voters) trained through Snakemake on the session's tiny base model:
    its config.json carries the variant and the delta, done.json its steps, eval.parquet its rows."""
    from tests.runs import workflow_copy
    from tests.test_matrix_tiny import matrix_config

    d = tmp_path_factory.mktemp("variant")
    workflow_copy(d, tmp_path_factory)
    cfg = matrix_config()
    cfg["matrices"]["tiny_matrix"]["variants"] = {"votes2": {"workflows": {"voting": {"n_votes": 2}}}}
    (d / "matrix.yaml").write_text(yaml.safe_dump(cfg))
    run = "voting-math-tiny-shared-s0-votes2"
    snakemake("--configfile", "matrix.yaml", "--cores", "1", f"results/runs/{run}/done.json", cwd=d, timeout=900)
    out = d / "results" / "runs" / run
    config_json = json.loads((out / "config.json").read_text())
    done = json.loads((out / "done.json").read_text())
    assert config_json["run"] == run and config_json["variant"] == "votes2"
    assert config_json["workflow_params"]["n_votes"] == 2
    assert done["steps_done"] == done["steps_expected"] == 2 and done["config_hash"] == config_json["config_hash"]
    assert len(pd.read_parquet(out / "eval.parquet"))
    assert not (d / "results" / "runs" / "voting-math-tiny-shared-s0").exists()  # only the target was trained


def test_status_and_plan_show_variant_runs(config, tmp_path):
    """`trainer status` lists each variant run by its id; the plan has a variant column, and its per-variant
    cost follows the delta (5 voters cost more per step than 2)."""
    from trainer.sweep.plan import plan_rows, summary
    from trainer.sweep.status import format_table, matrix_status

    cfg = ablations(config)
    rows = matrix_status(cfg, tmp_path)
    assert [r.run for r in rows] == [str(r) for r in expand_matrix(cfg)]
    assert "voting-code-qwen3-1.7b-shared-s0-votes5  " in format_table(rows)
    df = plan_rows(cfg, tmp_path)
    assert Counter(v for v in df["variant"] if v) == VARIANT_RUNS and (df["variant"] == "").sum() == 42
    step = df[df["workflow"] == "voting"].groupby("variant")["step_s"].mean()
    assert step["votes2"] < step[""] < step["votes5"]
    assert "per variant:" in summary(df, 64) and "per variant:" not in summary(plan_rows(config, tmp_path), 2)


def test_analyse_groups_variant_runs_apart(tmp_path):
    """Synthetic logs of plain and votes5 runs through `analyse` and the figures: the summary table has a row
    per cell and variant (votes5's higher curve kept apart); without variant runs it has no variant column."""
    from analysis.analyse import analyse
    from analysis.figures import render_all
    from analysis.settings import AnalysisSettings
    from tests.synthetic_logs import write_synthetic_run

    plain = [
        f"{w}-math-tiny-{p}-s{s}"
        for w, p in (("voting", "shared"), ("voting", "isolated"), ("single", "shared"))
        for s in (0, 1)
    ]
    runs = plain + [f"voting-math-tiny-{p}-s{s}-votes5" for p in ("shared", "isolated") for s in (0, 1)]
    for run in runs:
        level = 0.8 if run.endswith("votes5") else 0.4
        write_synthetic_run(
            tmp_path / "runs" / run,
            run,
            steps=10,
            eval_every=5,
            seed=len(run),
            accuracy=lambda step, level=level: level * step / 10,
        )
    for name, selected in (("all", runs), ("plain", plain)):
        results = tmp_path / name
        analyse([tmp_path / "runs" / r for r in selected], selected, AnalysisSettings(), results, log=io.StringIO())
        table = pd.read_csv(results / "tables" / "summary.csv")
        if name == "plain":  # every file as before variants: no variant column anywhere
            assert "variant" not in table and len(table) == 3
            written = [pd.read_csv(f) for f in results.rglob("*.csv")] + [
                pd.read_parquet(f) for f in results.rglob("*.parquet")
            ]
            assert len(written) > 10 and not [t for t in written if "variant" in t]
            continue
        assert "variant" in pd.read_parquet(results / "analysis" / "curves.parquet")
        assert len(table) == 5 and table["variant"].fillna("").tolist().count("votes5") == 2
        peak = table.fillna({"variant": ""}).set_index(["workflow", "policy", "variant"])["peak_acc"]
        peak = peak.str.split(" ").str[0]  # "mean ± std"
        assert float(peak[("voting", "shared", "votes5")]) > float(peak[("voting", "shared", "")])
        improves = pd.read_csv(results / "tables" / "improves_on_base.csv")
        assert {"", "votes5"} <= set(improves[improves["group"] == "variant"]["value"].fillna(""))
        assert render_all(results, tmp_path / "figures", log=io.StringIO())


def test_variant_resolves_from_the_matrix_that_defines_it(config):
    """A variant run resolves under another matrix in use (e.g. `trainer plan --matrix paper_ablations` with the
    demo in use) where one matrix defines the name; an undefined or ambiguous name fails naming it."""
    run = parse_run_id("voting-math-qwen3-1.7b-shared-s0-votes5")
    assert config["matrix"] == "demo" and resolve_run_config(config, run)["workflow_params"]["n_votes"] == 5
    with pytest.raises(ValueError, match="variant 'nope': no matrix defines it"):
        resolve_run_config(config, parse_run_id("voting-math-tiny-shared-s0-nope"))
    cfg = copy.deepcopy(config)
    cfg["matrices"]["demo"]["variants"] = {"votes5": {"workflows": {"voting": {"n_votes": 4}}}}
    assert resolve_run_config(cfg, run)["workflow_params"]["n_votes"] == 4  # the matrix in use first
    cfg["matrix"] = "paper"
    with pytest.raises(ValueError, match="variant 'votes5': matrices .* define it differently"):
        resolve_run_config(cfg, run)
