"""The workflow registry, workflow names in config and run ids, and the roles config.json records for analysis."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from tests.workflow import ROOT
from trainer.contract import rundir
from trainer.contract.config import ConfigError
from trainer.contract.runid import WORKFLOW_NAME, RunId, parse_run_id
from trainer.sweep.config import load_yaml, resolve_run_config, validate_config
from trainer.sweep.launch import config_json_content
from trainer.workflows import WORKFLOWS, Workflow, register, role_facts, workflow_class

SCHEMA = load_yaml(ROOT / "rules" / "config.schema.yaml")
BASE_MODEL = {"path": "/x/model", "build_time_s": 3.0, "vocab": 512}


@pytest.fixture
def config():
    return load_yaml(ROOT / "config.yaml")


def _workflow(name: str, roles: tuple[str, ...], **attrs) -> type[Workflow]:
    return type("Made", (Workflow,), {"name": name, "roles": roles, **attrs})


@pytest.mark.parametrize(
    "name, roles, attrs, message",
    [
        ("my-flow", ("a",), {}, "must match"),
        ("Flow", ("a",), {}, "must match"),
        ("flow_a", (), {}, "roles must be distinct"),
        ("flow_b", ("a", "a"), {}, "roles must be distinct"),
        ("flow_c", ("a", "b"), {"parallel_role": "c"}, r"name \['generator', 'c'\], not among its roles"),
        ("voting", ("a",), {"answer_roles": ("a",)}, "'voting' is registered twice"),
    ],
)
def test_register_refuses_a_bad_workflow_class(name, roles, attrs, message):
    with pytest.raises(ValueError, match=message):
        register(_workflow(name, roles, **attrs))
    assert WORKFLOWS["voting"].__module__ == "trainer.workflows.voting"


@pytest.mark.parametrize(
    "params, message",
    [
        ({}, r"unknown workflow 'nope': known are \['eval_opt', 'orch_workers', .*'voting'\].*workflows\.nope\.module"),
        ({"module": "no_such_module_here"}, r"workflows\.nope\.module: cannot import 'no_such_module_here'"),
        ({"module": "json"}, r"workflows\.nope\.module: module 'json' registers no workflow 'nope'"),
    ],
)
def test_an_unregistered_workflow_is_named_with_how_to_fix_it(config, params, message):
    with pytest.raises(ValueError, match=message):
        workflow_class("nope", params)
    config["workflows"]["nope"] = params
    with pytest.raises(ConfigError, match=r"workflows\.nope"):
        validate_config(config, SCHEMA)


def test_workflow_names_in_overrides_must_be_configured(config):
    config["overrides"].append({"match": {"workflow": "nope"}, "training": {"max_steps": 3}})
    config["overrides"].append({"match": {"task": "math"}, "workflows": {"nada": {"n_votes": 2}}})
    with pytest.raises(ConfigError) as e:
        validate_config(config, SCHEMA)
    n = len(config["overrides"])
    assert f"overrides[{n - 2}].match.workflow: 'nope' has no entry in `workflows`" in str(e.value)
    assert f"overrides[{n - 1}].workflows: 'nada' has no entry in `workflows`" in str(e.value)


def test_the_schema_and_the_run_id_agree_on_workflow_names():
    assert SCHEMA["$defs"]["workflow_name"]["pattern"] == f"^{WORKFLOW_NAME}$"
    assert "enum" not in SCHEMA["$defs"]["workflow_name"]
    for name in WORKFLOWS:
        assert re.fullmatch(WORKFLOW_NAME, name)


@pytest.mark.parametrize("text", ["my_flow2-math-qwen3-0.6b-isolated-s1", "a-code-tiny-shared-s0"])
def test_any_workflow_name_parses_from_a_run_id(text):
    rid = parse_run_id(text)
    assert str(rid) == text and rid.workflow == text.split("-")[0]


def test_config_json_records_the_roles_outside_the_hash(config):
    run = RunId("voting", "math", "tiny", "shared", 0)
    cfg = config_json_content(resolve_run_config(config, run), BASE_MODEL)
    assert cfg["roles"] == ["generator", "aggregator"] and cfg["parallel_role"] == {"role": "generator", "agents": 3}
    without = {k: v for k, v in cfg.items() if k not in ("roles", "parallel_role", "config_hash")}
    assert config_json_content(without, BASE_MODEL)["config_hash"] == cfg["config_hash"]
    # the hash config.json's roles leave unchanged (pinned at e1ac9e4 before they existed; re-pinned whenever the
    # tiny model or its warm start changed, which changes every tiny run's hash on purpose,
    # tests/data/plain_config_hashes.json)
    assert cfg["config_hash"] == "b5fb9fabf066402f"


@pytest.mark.parametrize(
    "name, params, roles, parallel",
    [
        ("single", {}, ["generator"], None),
        ("eval_opt", {"max_iterations": 2}, ["generator", "evaluator"], None),
        ("voting", {"n_votes": 5}, ["generator", "aggregator"], {"role": "generator", "agents": 5}),
        ("orch_workers", {}, ["orchestrator", "worker", "synthesizer"], {"role": "worker", "agents": 3}),
    ],
)
def test_role_facts_and_what_analysis_reads_back(name, params, roles, parallel):
    facts = role_facts(name, params)
    assert facts == {"roles": roles, "parallel_role": parallel}
    read = rundir.workflow_roles({"run": "r", "workflow": name, **facts})
    # a config.json written before the roles were recorded reads the same from the legacy table
    legacy = rundir.workflow_roles({"run": "r", "workflow": name, "workflow_params": {"max_subtasks": 3, **params}})
    assert read == legacy
    assert read.roles == tuple(roles) and read.parallel_role == (parallel or {}).get("role")


def test_an_old_config_json_of_an_unknown_workflow_is_named():
    with pytest.raises(ValueError, match=r"r1: config.json has no `roles` and its workflow 'mine'"):
        rundir.workflow_roles({"run": "r1", "workflow": "mine"})


def test_tables_and_figures_place_workflows_they_do_not_list_last():
    from analysis.figure_data import make_grid
    from analysis.names import workflow_rank

    runs = pd.DataFrame(
        {"workflow": ["zeta", "voting", "alpha", "single"], "task": "math", "scale": "tiny", "policy": "shared"}
    )
    assert make_grid(runs, runs).workflows == ["single", "voting", "alpha", "zeta"]
    assert sorted(runs["workflow"], key=workflow_rank) == ["single", "voting", "alpha", "zeta"]
