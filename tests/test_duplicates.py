"""No run twice under two names (trainer/sweep/duplicates.py): two run ids whose effective settings are equal fail
the config check, at `snakemake -n`, naming both; the shipped matrices have none; a variant names the workflows
it applies to.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from tests.workflow import ROOT, snakemake
from trainer.contract.config import ConfigError, config_hash
from trainer.contract.runid import parse_run_id
from trainer.sweep.config import expand_matrix, load_yaml, resolve_matrix, resolve_run_config, validate_config
from trainer.sweep.duplicates import duplicate_run_problems, effective_settings, has_role_rewards

SCHEMA = load_yaml(ROOT / "rules" / "config.schema.yaml")


@pytest.fixture
def config() -> dict:
    return load_yaml(ROOT / "config.yaml")


def checked(config: dict, matrix: str) -> dict:
    """`config` with `matrix` in use, through the config check."""
    config = {**copy.deepcopy(config), "matrix": matrix}
    validate_config(config, copy.deepcopy(SCHEMA))
    return config


def test_effective_settings_leave_out_the_run_id_alone(config):
    rc = resolve_run_config(config, parse_run_id("voting-math-tiny-shared-s0"))
    view = effective_settings(rc)
    assert "run" not in view and view["seed"] == 0 and view["workflow"] == "voting"
    renamed = {**rc, "run": "another-name"}
    assert effective_settings(renamed) == view and config_hash(renamed) != config_hash(rc)
    assert effective_settings({**rc, "seed": 1}) != view


@pytest.mark.parametrize(
    "workflow, own", [("orch_workers", False), ("voting", True), ("eval_opt", True), ("single", True)]
)
def test_per_role_rewards_count_only_where_the_workflow_has_them(config, workflow, own):
    assert has_role_rewards(workflow, config["workflows"][workflow]) is own
    rc = resolve_run_config(config, parse_run_id(f"{workflow}-math-tiny-shared-s0"))
    per_role = copy.deepcopy(rc)
    per_role["training"]["reward_mode"] = "per_role"
    assert config_hash(per_role) != config_hash(rc)  # the hash sees the setting either way
    assert (effective_settings(per_role) == effective_settings(rc)) is not own


def test_a_variant_that_changes_nothing_fails_naming_both_runs(config):
    config["matrices"]["demo"]["variants"] = {"votes3": {"workflows": {"voting": {"n_votes": 3}}}}  # the default
    with pytest.raises(ConfigError) as e:
        checked(config, "demo")
    message = str(e.value)
    for policy in ("shared", "isolated"):
        for task in ("math", "code"):
            plain = f"voting-{task}-tiny-{policy}-s0"
            assert f"runs {plain} and {plain}-votes3 have equal effective settings" in message, message
    assert "matrices.demo.variants.votes3.applies_to" in message
    assert message.count("equal effective settings") == 4  # the 4 voting runs, no other


def test_per_role_on_orchestrator_workers_is_its_plain_run_again(config):
    del config["matrices"]["paper_ablations"]["variants"]["per_role"]["applies_to"]
    with pytest.raises(ConfigError) as e:
        checked(config, "paper_ablations")
    dups = [line for line in str(e.value).splitlines() if "equal effective settings" in line]
    assert len(dups) == 12 and all("orch_workers-" in line and "-per_role " in line for line in dups), dups
    assert "runs orch_workers-math-qwen3-1.7b-shared-s0 and orch_workers-math-qwen3-1.7b-shared-s0-per_role" in dups[0]


def test_the_shipped_matrices_have_no_run_twice(config):
    for matrix in config["matrices"]:
        cfg = checked(config, matrix)
        assert duplicate_run_problems(resolve_matrix(cfg), matrix) == []


def test_per_role_applies_to_eval_opt_and_voting(config):
    runs = expand_matrix(checked(config, "paper_ablations"))
    assert {r.workflow for r in runs if r.variant == "per_role"} == {"eval_opt", "voting"}
    assert len([r for r in runs if r.variant == "per_role"]) == 24
    assert {r.workflow for r in runs if r.variant == "episode_groups"} == {"eval_opt", "voting", "orch_workers"}


def test_applies_to_names_workflows_of_its_matrix(config):
    config["matrices"]["demo"]["variants"] = {"odd": {"applies_to": ["single"], "training": {"beta": 0.1}}}
    with pytest.raises(ConfigError, match=r"matrices\.demo\.variants\.odd\.applies_to: \['single'\] not among"):
        checked(config, "demo")
    config["matrices"]["demo"]["variants"] = {"odd": {"applies_to": ["debate"], "training": {"beta": 0.1}}}
    with pytest.raises(ConfigError, match=r"matrices\.demo\.variants\.odd\.applies_to"):
        checked(config, "demo")


def test_dry_run_fails_naming_both_runs_and_passes_the_ablations(workdir):
    assert snakemake("-n", "--config", "matrix=paper_ablations", cwd=workdir).returncode == 0
    config = load_yaml(workdir / "config.yaml")
    config["matrices"]["demo"]["variants"] = {"votes3": {"workflows": {"voting": {"n_votes": 3}}}}
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    failed = snakemake("-n", cwd=workdir, check=False)
    out = failed.stdout + failed.stderr
    assert failed.returncode != 0
    assert "runs voting-math-tiny-shared-s0 and voting-math-tiny-shared-s0-votes3 have equal effective settings" in out
