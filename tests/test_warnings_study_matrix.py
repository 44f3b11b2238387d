"""The `warnings_study` matrix: tiny runs that fall and runs that do not, for judging the early warnings
(config.yaml). Dry-run only here: running it takes both cores for about 40 minutes (docs/benchmarks.md)."""

from __future__ import annotations

from collections import Counter

from tests.workflow import snakemake, train_runs
from trainer.contract.runid import parse_run_id
from trainer.sweep.config import expand_matrix, load_yaml, resolve_run_config

SCHEDULE = ("learning_rate", "max_steps", "eval_every", "save_every", "eval_problems")


def test_warnings_study_has_six_seeds_two_learning_rates_and_the_voters_dose_response(workdir):
    config = load_yaml(workdir / "config.yaml")
    runs = expand_matrix(config, "warnings_study")
    assert {r.seed for r in runs} == set(range(6)) and {r.scale for r in runs} == {"tiny-study"}
    assert Counter(r.variant for r in runs) == {None: 24, "lr2e3": 24, "votes2": 12, "votes5": 12}
    assert {r.workflow for r in runs if r.variant in ("votes2", "votes5")} == {"voting"}
    demo = resolve_run_config(config, parse_run_id("voting-math-tiny-isolated-s0"))
    plain = resolve_run_config(config, parse_run_id("voting-math-tiny-study-isolated-s0"))
    cool = resolve_run_config(config, parse_run_id("voting-math-tiny-study-isolated-s0-lr2e3"))
    five = resolve_run_config(config, parse_run_id("voting-math-tiny-study-isolated-s0-votes5"))
    assert cool["training"]["learning_rate"] == demo["training"]["learning_rate"] < plain["training"]["learning_rate"]
    assert (plain["workflow_params"]["n_votes"], five["workflow_params"]["n_votes"]) == (3, 5)
    # apart from the schedule, the tiny demo's settings, per-agent gradients included
    assert {k: v for k, v in plain["training"].items() if k not in SCHEDULE} == {
        k: v for k, v in demo["training"].items() if k not in SCHEDULE
    }
    assert plain["training"]["agent_gradients"] is True
    assert plain["training"]["eval_every"] < demo["training"]["eval_every"]  # a warning's lead counted in evals


def test_warnings_study_dry_run_trains_each_run_once_on_its_own_base_model(workdir):
    runs = [str(r) for r in expand_matrix(load_yaml(workdir / "config.yaml"), "warnings_study")]
    dry = snakemake("-n", "--config", "matrix=warnings_study", cwd=workdir).stdout
    assert train_runs(dry) == Counter(runs)
    assert "results/models/tiny-study/model.json" in dry
