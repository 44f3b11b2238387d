"""What the rules ask of the matrix (trainer/sweep/dag.py), computed once, against each run resolved on its own.

Each answer that MatrixRuns computes once per run or once per cell is checked, for every run of the shipped
matrices (under the slurm profile's config too), against the per-run functions it replaces: the resolved
config, the rerun-trigger items, the priority, the prefetch inputs and the hub datasets. The run-directory
readers (finished runs and their stamps, running steps) are checked on directories made here.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest

from tests.workflow import ROOT
from trainer.contract.runid import RunId
from trainer.sweep.config import load_yaml, resolve_matrix, resolve_run_config, run_cells, validate_config
from trainer.sweep.cost import run_turns
from trainer.sweep.dag import (
    MatrixRuns,
    finished_run_dirs,
    finished_runs_stamp,
    hashed_param_name,
    running_steps,
)
from trainer.sweep.launch import rerun_trigger_items
from trainer.sweep.prefetch import dataset_key, hf_dataset_specs, needs_model_prefetch

SCHEMA = load_yaml(ROOT / "rules" / "config.schema.yaml")
MATRICES = ("demo", "paper", "warnings_study")


def config_of(matrix: str, slurm: bool = False, seeds: list[int] | None = None) -> dict:
    """config.yaml (with the slurm profile's config merged over it) with `matrix` in use, validated."""
    config = load_yaml(ROOT / "config.yaml")
    if slurm:
        for key, value in load_yaml(ROOT / "profiles" / "slurm" / "paper.yaml").items():
            config[key] = {**config[key], **value} if isinstance(value, dict) else value
    config["matrix"] = matrix
    if seeds is not None:
        config["seeds"] = seeds
    validate_config(config, copy.deepcopy(SCHEMA))
    return config


@pytest.fixture(scope="module", params=[(m, False) for m in MATRICES] + [("paper", True)], ids=str)
def matrix(request) -> MatrixRuns:
    name, slurm = request.param
    return MatrixRuns(config_of(name, slurm, seeds=[0, 1, 2]), "results")


def test_each_run_resolves_as_on_its_own(matrix):
    assert matrix.run_ids and len(set(matrix.run_ids)) == len(matrix.run_ids)
    for run_id in matrix.run_ids:
        assert matrix.run_config(run_id) == resolve_run_config(matrix.config, matrix.run(run_id))
        assert json.loads(matrix.run_config_json(run_id).strip("'")) == matrix.run_config(run_id)


def test_a_run_outside_the_matrix_resolves_on_its_own(matrix):
    outside = RunId("voting", "math", next(iter(matrix.config["scales"])), "shared", 99)
    assert str(outside) not in matrix.run_ids
    assert matrix.run_config(str(outside)) == resolve_run_config(matrix.config, outside)


def test_cells_group_the_runs_that_differ_in_their_seed_alone(matrix):
    cells = run_cells(matrix.resolved)
    assert [r for _, runs in cells for r in runs] == list(matrix.resolved)  # every run once, in order
    for run_config, runs in cells:
        assert len({r.cell for r in runs}) == 1 and len({r.seed for r in runs}) == len(runs) == 3
        assert run_config is matrix.resolved[runs[0]]


def test_trigger_items_priority_and_prefetch_inputs_are_each_runs_own(matrix):
    for run_id in matrix.run_ids:
        rc = resolve_run_config(matrix.config, matrix.run(run_id))
        assert matrix.trigger_items(run_id) == rerun_trigger_items(rc)
        assert list(matrix.trigger_items(run_id)) == list(rerun_trigger_items(rc))  # the same order of keys
        assert matrix.priority(run_id) == run_turns(rc)
        files = [f"results/prefetch/models/{rc['scale']}.json"] if needs_model_prefetch(rc["model"]["name"]) else []
        files += [
            f"results/prefetch/datasets/{dataset_key(s['path'])}.json" for s in hf_dataset_specs(rc["task_params"])
        ]
        assert matrix.prefetch_inputs(run_id) == sorted(set(files))


def test_hashed_params_name_every_key_and_keep_only_shared_items_as_strings(matrix):
    params = matrix.hashed_params()
    keys = {k for r in matrix.run_ids for k in matrix.trigger_items(r)}
    assert {key for key, _ in params.values()} == keys
    assert all(name == hashed_param_name(key) for name, (key, _) in params.items())
    for key, same in params.values():
        items = {matrix.trigger_items(r).get(key, "") for r in matrix.run_ids}
        if same is not None:  # a plain string param: every run has this one item
            assert items == {same} and "{" not in same
        else:
            assert len(items) > 1 or "{" in next(iter(items))
    assert params["hashed_run"][1] is None and params["hashed_seed"][1] is None  # every run its own


def test_a_key_some_runs_lack_is_a_function_param():
    config = config_of("demo")
    config["overrides"].append({"match": {"workflow": "voting"}, "training": {"normalize_advantages_per_role": True}})
    matrix = MatrixRuns(config, "results")
    key, same = matrix.hashed_params()[hashed_param_name("training.normalize_advantages_per_role")]
    assert same is None  # the voting runs' item, "" for the others
    items = {matrix.trigger_items(r).get(key, "") for r in matrix.run_ids}
    assert items == {"", "training.normalize_advantages_per_role=true"}


def test_hub_dataset_specs_are_each_distinct_spec_of_every_run():
    matrix = MatrixRuns(config_of("paper", slurm=True, seeds=[0, 1, 2]), "results")
    per_run = [s for r in matrix.run_ids for s in hf_dataset_specs(matrix.run_config(r)["task_params"])]
    distinct = matrix.hub_dataset_specs()
    assert len(distinct) < len(per_run)
    assert [json.dumps(s, sort_keys=True) for s in distinct] == list(
        dict.fromkeys(json.dumps(s, sort_keys=True) for s in per_run)
    )
    livecodebench = dataset_key("lighteval/code_generation_lite")
    assert matrix.hub_dataset_id(livecodebench) == "lighteval/code_generation_lite"
    assert matrix.hub_dataset_configs(livecodebench) == "--config-name v4_v5"
    with pytest.raises(ValueError, match="no hub dataset of the matrix is spelled 'nobody--nothing'"):
        matrix.hub_dataset_id("nobody--nothing")


def test_a_pinned_hub_dataset_gives_its_revision():
    config = config_of("paper", slurm=True)
    config["tasks"]["code"]["eval"][0]["revision"] = "a" * 40
    matrix = MatrixRuns(config, "results")
    assert matrix.hub_dataset_revision(dataset_key("lighteval/code_generation_lite")) == f" --revision {'a' * 40}"


def test_resolve_matrix_shares_a_cells_sections_and_names_each_run():
    config = config_of("demo", seeds=[0, 1])
    resolved = resolve_matrix(config)
    a, b = (resolved[r] for r in list(resolved)[:2])
    assert (a["seed"], b["seed"]) == (0, 1) and a["run"] != b["run"]
    assert a["training"] is b["training"]  # one resolution per cell: read, never modify


def make_run_dir(root: Path, run: str, done_ns: int | None = None, step: int | None = None) -> str:
    """A run directory with done.json (its mtime `done_ns`) and/or work/progress.json at `step`."""
    d = root / "runs" / run
    (d / "work").mkdir(parents=True)
    if done_ns is not None:
        (d / "done.json").write_text("{}")
        os.utime(d / "done.json", ns=(done_ns, done_ns))
    if step is not None:
        (d / "work" / "progress.json").write_text(json.dumps({"step": step}))
    return str(d)


def test_finished_and_running_runs_are_read_from_their_directories(tmp_path):
    done = make_run_dir(tmp_path, "voting-math-tiny-shared-s0", done_ns=1_700_000_000_000_000_000, step=20)
    running = make_run_dir(tmp_path, "voting-math-tiny-shared-s1", step=7)
    waiting = make_run_dir(tmp_path, "voting-math-tiny-shared-s2")
    dirs = [done, running, waiting]
    assert finished_run_dirs(dirs) == [done]
    assert finished_runs_stamp(dirs) == "voting-math-tiny-shared-s0@1700000000000000000"
    assert running_steps(dirs) == "voting-math-tiny-shared-s1@7"  # a finished run is not running
    assert finished_runs_stamp([waiting]) == "" == running_steps([waiting])


def test_a_run_outside_the_matrix_keeps_the_items_the_shared_params_lack():
    config = config_of("demo")
    config["overrides"].append({"match": {"scale": "qwen3-0.6b"}, "training": {"beta": 0.25}})
    matrix = MatrixRuns(config, "results")
    shared = {same for _, same in matrix.hashed_params().values() if same is not None}
    assert all(matrix.items_outside(r) == "" for r in matrix.run_ids)
    outside = "voting-math-qwen3-0.6b-shared-s0"
    items = set(matrix.trigger_items(outside).values())
    assert items - shared and matrix.items_outside(outside) == " ".join(sorted(items - shared))
    assert "training.beta=0.25" in items - shared and "training.beta=0.25" not in shared
