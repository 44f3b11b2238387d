"""Config validation, run ids and matrix expansion."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from tests.workflow import ROOT
from trainer import settings
from trainer.contract.config import HASHED_WHEN_SET, ConfigError, changed_keys, config_hash
from trainer.contract.runid import RunId, parse_run_id
from trainer.sweep.config import expand_matrix, load_yaml, resolve_run_config, validate_config

SCHEMA = load_yaml(ROOT / "rules" / "config.schema.yaml")


@pytest.fixture
def config():
    return load_yaml(ROOT / "config.yaml")


def test_shipped_config_is_valid(config):
    validate_config(config, SCHEMA)


def test_paper_matrix_is_126_runs_each_once(config):
    runs = expand_matrix(config, "paper")
    assert len(runs) == 126 and len(set(runs)) == 126
    assert sum(r.workflow == "single" for r in runs) == 18
    assert all(r.policy == "shared" for r in runs if r.workflow == "single")
    config["seeds"] = [0, 1, 2, 3, 4]
    assert len(expand_matrix(config, "paper")) == 210


def test_demo_matrix(config):
    runs = expand_matrix(config)
    assert len(runs) == 14 and {r.scale for r in runs} == {"tiny"}


def test_demo_runs_take_the_tiny_tasks_completion_length(config):
    for run in expand_matrix(config):
        rc = resolve_run_config(config, run)
        assert rc["training"]["max_completion_length"] == rc["task_params"]["max_completion_length"] <= 48, run
    paper = resolve_run_config(config, RunId("orch_workers", "math", "qwen3-0.6b", "shared", 0))
    assert paper["training"]["max_completion_length"] == 3072


@pytest.mark.parametrize(
    "text",
    ["voting-math-qwen3-0.6b-shared-s0", "orch_workers-code-tiny-isolated-s12", "single-math-my-model.v2-shared-s3"],
)
def test_run_id_round_trip(text):
    assert str(parse_run_id(text)) == text


@pytest.mark.parametrize(
    "text",
    [
        "vot-ing-math-tiny-shared-s0",
        "Voting-math-tiny-shared-s0",
        "voting-math-tiny-shared-0",
        "voting-chess-tiny-shared-s0",
    ],
)
def test_bad_run_id_is_named(text):
    with pytest.raises(ValueError, match=text):
        parse_run_id(text)


def test_unknown_key_is_named(config):
    config["training"]["learning_rat"] = 1e-5
    with pytest.raises(ConfigError, match=r"training\.learning_rat: unknown key"):
        validate_config(config, SCHEMA)


def test_unknown_workflow_is_named(config):
    config["matrices"]["demo"]["workflows"] = ["voting", "debate"]
    with pytest.raises(ConfigError, match=r"matrices\.demo\.workflows: 'debate' has no entry in `workflows`"):
        validate_config(config, SCHEMA)


def test_unknown_scale_is_named(config):
    config["matrices"]["demo"]["scales"] = ["qwen3-70b"]
    with pytest.raises(ConfigError, match=r"unknown scale 'qwen3-70b'"):
        validate_config(config, SCHEMA)


def test_command_line_strings_are_coerced(config):
    config["seeds"] = ["0", "1"]
    config["launcher"]["max_num_timeout"] = "5"
    validate_config(config, SCHEMA)
    assert config["seeds"] == [0, 1] and config["launcher"]["max_num_timeout"] == 5


def test_overrides_apply_in_order(config):
    rc = resolve_run_config(config, RunId("orch_workers", "math", "qwen3-0.6b", "shared", 0))
    assert rc["resources"]["gpus"] == 4 and rc["training"]["max_completion_length"] == 3072
    rc = resolve_run_config(config, RunId("voting", "code", "qwen3-0.6b", "isolated", 0))
    assert rc["resources"]["gpus"] == 2 and rc["training"]["max_completion_length"] == 2048
    rc = resolve_run_config(config, RunId("eval_opt", "code", "tiny", "shared", 0))
    assert rc["workflow_params"]["max_iterations"] == 2 and rc["resources"]["gpus"] == 0
    assert rc["task_params"]["train"]["source"] == "synthetic_functions"


def test_hash_ignores_where_a_run_runs(config):
    run = RunId("voting", "math", "tiny", "shared", 0)
    a = resolve_run_config(config, run)
    other = copy.deepcopy(config)
    other["launcher"]["backend"] = "slurm"
    other["scales"]["tiny"]["resources"]["mem_gb"] = 64
    assert config_hash(a) == config_hash(resolve_run_config(other, run))
    other["training"]["beta"] = 0.5
    b = resolve_run_config(other, run)
    assert config_hash(a) != config_hash(b)
    assert changed_keys(a, b) == ["training.beta"]


def test_late_added_settings_enter_the_hash_only_when_set(config):
    """Settings added after runs existed keep those runs' hashes at their defaults, and count once set."""
    run = RunId("voting", "math", "tiny", "shared", 0)
    a = resolve_run_config(config, run)
    a["training"]["agent_gradients"] = False  # at its default: the tiny demo's override turns it on
    without = copy.deepcopy(a)
    for key in ("agent_gradients", "early_warning", "generation_memory_gb", "on_warning", "vllm"):
        del without["training"][key]
    assert config_hash(a) == config_hash(without)
    for key, value in [("on_warning", "stop"), ("generation_memory_gb", 1.0), ("agent_gradients", True)]:
        b = copy.deepcopy(a)
        b["training"][key] = value
        assert changed_keys(a, b) == [f"training.{key}"]
    b = copy.deepcopy(a)
    b["training"]["early_warning"]["window"] = 7
    assert changed_keys(a, b) == ["training.early_warning"]


def test_the_hash_leaves_out_each_late_added_setting_at_its_typed_default():
    """The contract's HASHED_WHEN_SET names training settings, each at the value the typed settings take
    when the key is absent (a nested setting: each field the contract names at its default), so that a run
    config with or without the key hashes the same. A default changed in trainer/settings.py fails here:
    it would change what finished runs computed under the same hash."""
    fields = {f.name for f in dataclasses.fields(settings.TrainingSettings)}
    assert set(HASHED_WHEN_SET) <= fields
    for key, value in HASHED_WHEN_SET.items():
        default = settings.default_of(settings.TrainingSettings, key)
        if dataclasses.is_dataclass(default):
            default = {k: v for k, v in dataclasses.asdict(default).items() if k in value}
            assert set(default) == set(value), f"training.{key}: {set(value) - set(default)} not typed settings"
        assert value == default, f"training.{key}: the hash leaves out {value!r}, the typed default is {default!r}"


def test_hash_covers_the_base_model_but_not_its_build_time(config):
    rc = resolve_run_config(config, RunId("voting", "math", "tiny", "shared", 0))
    built = {"path": "m", "fingerprint": "abc", "warm_start": {"steps": 400, "final_loss": 0.3}}
    a = {**rc, "base_model": {**built, "build_time_s": 10.0}}
    b = {**rc, "base_model": {**built, "build_time_s": 99.0}}
    assert config_hash(a) == config_hash(b)
    c = {**rc, "base_model": {**built, "fingerprint": "def", "build_time_s": 10.0}}
    assert changed_keys(a, c) == ["base_model.fingerprint"]


def test_base_model_does_not_depend_on_the_training_schedule(config):
    from trainer.sweep.config import base_model_spec

    before = base_model_spec(config, "tiny", ["math", "code"])
    config["training"]["beta"] = 0.1
    config["overrides"][-1]["training"]["max_steps"] = 99
    assert base_model_spec(config, "tiny", ["math", "code"]) == before


def test_per_role_advantage_normalization_is_an_optional_boolean(config):
    config["training"]["normalize_advantages_per_role"] = True
    validate_config(config, SCHEMA)
    config["training"]["normalize_advantages_per_role"] = [1]
    with pytest.raises(ConfigError, match="normalize_advantages_per_role"):
        validate_config(config, SCHEMA)
