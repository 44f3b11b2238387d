"""A fifth workflow, defined in this file alone, runs through the whole pipeline: one file plus config.

The workflow (a proposer answers, a verifier judges the answer) is registered with `@register` below and
named in config by `workflows.<name>.module: tests.test_fifth_workflow`, so every process that looks it up
imports this module: Snakemake while it parses the config, the launcher (it writes the roles into
config.json) and the trainer subprocess. The analysis never imports it: it reads the roles from
config.json. `git grep` shows the workflow's name in this file only.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.runs import workflow_copy
from tests.workflow import PACKAGE_LINKS, ROOT, snakemake
from trainer.contract import rundir
from trainer.sweep.config import base_model_spec, load_yaml, validate_config
from trainer.tasks import Problem, get_task
from trainer.workflows import (
    WORKFLOWS,
    Completion,
    Episode,
    Turn,
    Workflow,
    make_workflow,
    parse_verdict,
    register,
    score_episodes,
)
from trainer.workflows.episode import mean

NAME = "second_opinion"
MODULE = "tests.test_fifth_workflow"


@register
class SecondOpinion(Workflow):
    """A proposer answers; a verifier judges the answer \\boxed{Correct} or \\boxed{Incorrect}; the final answer
    is the proposer's. Its prompts are its own (in the formats the tiny model's warm start knows)."""

    name, roles = NAME, ("proposer", "verifier")
    answer_roles = ("proposer",)
    prompt_templates = {
        "proposer": "{problem}\n\n{answer_format}",
        "verifier": "Problem: {problem}\n\nSolution: {solution}\n\nIs the solution correct? Reply \\boxed{Correct} "
        "or \\boxed{Incorrect}, with brief feedback that does not reveal the answer.",
    }

    @classmethod
    def max_turns(cls, params):
        return 2

    def run(self, problems, generate):
        prompts = [self.prompt("proposer", problem=p.question) for p in problems]
        episodes = [
            Episode(p, [Turn("proposer", 0, q, o)], final_text=o.text)
            for p, q, o in zip(problems, prompts, generate("proposer", prompts))
        ]
        checks = [self.prompt("verifier", problem=ep.problem.question, solution=ep.final_text) for ep in episodes]
        for ep, q, o in zip(episodes, checks, generate("verifier", checks)):
            ep.turns.append(Turn("verifier", 0, q, o))
            ep.info["verdict"] = parse_verdict(o.text)
        return episodes

    def demonstrations(self, problem, wrong, rng):
        bad = rng.choice(wrong)
        return [
            (self.prompt("proposer", problem=problem.question), problem.demonstration),
            (self.prompt("verifier", problem=problem.question, solution=problem.demonstration), "\\boxed{Correct}"),
            (self.prompt("verifier", problem=problem.question, solution=bad), "Wrong. \\boxed{Incorrect}"),
        ]

    def diagnostics(self, episodes):
        return {
            "verifier_accept_rate": mean([ep.info["verdict"] is True for ep in episodes]),
            "verifier_parse_rate": mean([ep.info["verdict"] is not None for ep in episodes]),
        }


SCHEDULE = {
    "max_steps": 2,
    "eval_every": 2,
    "save_every": 2,
    "prompts_per_step": 2,
    "num_generations": 2,
    "eval_problems": 4,
    "samples_per_eval": 2,
    "max_completion_length": 16,
}
RUNS = [f"{NAME}-math-tiny-{policy}-s0" for policy in ("shared", "isolated")]


def sweep_config() -> dict:
    """config.yaml's keys this test changes: the new workflow's entry (its module), a matrix of it alone at
    the tiny scale (shared and isolated), a very short schedule and the `local` launcher (a subprocess)."""
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    cfg["workflows"] = {NAME: {"module": MODULE}}  # merged into config.yaml's by --configfile
    cfg["matrices"] = {
        "fifth": {
            "workflows": [NAME],
            "tasks": ["math"],
            "scales": ["tiny"],
            "policies": ["shared", "isolated"],
            "seeds": [0],
            "single_baseline": False,
        }
    }
    cfg["matrix"] = "fifth"
    tiny = next(o for o in cfg["overrides"] if o["match"] == {"scale": "tiny"})
    tiny["training"].update(SCHEDULE)
    tiny["resources"] = {**tiny.get("resources", {}), "cpus": 1}
    cfg["launcher"].update(backend="local", poll_interval_s=0.5)
    return {k: cfg[k] for k in ("workflows", "matrices", "matrix", "overrides", "launcher")}


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    """A workflow copy that trained the new workflow's runs (`train_all`), then ran `snakemake figures`."""
    d = tmp_path_factory.mktemp("fifth_workflow")
    # this checkout's packages, and this module; the session's cached tiny model: no rebuild
    workflow_copy(d, tmp_path_factory, (*PACKAGE_LINKS, "tests"))
    (d / "fifth.yaml").write_text(yaml.safe_dump(sweep_config()))
    snakemake("--configfile", "fifth.yaml", "--cores", "2", "train_all", cwd=d, timeout=600)
    snakemake("--configfile", "fifth.yaml", "--cores", "2", "figures", cwd=d, timeout=600)
    return d


def test_the_workflow_runs_and_is_scored_with_its_own_prompts():
    params = {"module": MODULE}
    wf = make_workflow(NAME, params, get_task("math", workers=1))
    problems = [Problem(id="p0", question="Calculate 2 + 3.", answer="5", demonstration="\\boxed{5}", source="t")]
    replies = {"proposer": "\\boxed{5}", "verifier": "\\boxed{Correct}"}
    episodes = wf.run(problems, lambda role, prompts: [Completion(replies[role]) for _ in prompts])
    score_episodes(wf, episodes)
    assert [t.role for t in episodes[0].turns] == ["proposer", "verifier"] and episodes[0].correct
    assert "Solution: \\boxed{5}" in episodes[0].turns[1].prompt
    assert wf.diagnostics(episodes) == {"verifier_accept_rate": 1.0, "verifier_parse_rate": 1.0}
    pairs = wf.demonstrations(problems[0], ["\\boxed{7}"], random.Random(0))
    assert [c for _, c in pairs] == ["\\boxed{5}", "\\boxed{Correct}", "Wrong. \\boxed{Incorrect}"]


def test_config_names_it_by_module_and_the_base_model_learns_its_formats():
    config = load_yaml(ROOT / "config.yaml")
    config["workflows"][NAME] = {"module": MODULE}
    config["matrices"]["demo"]["workflows"].append(NAME)
    validate_config(config, load_yaml(ROOT / "rules" / "config.schema.yaml"))
    spec = base_model_spec(config, "tiny", ["math"])
    assert spec["tasks"]["math"]["workflows"][NAME]["module"] == MODULE


@pytest.mark.slow
def test_a_fifth_workflow_runs_through_training_and_snakemake_figures(sweep_dir):
    results = sweep_dir / "results"
    for run in RUNS:
        d = results / "runs" / run
        config = json.loads((d / rundir.CONFIG_JSON).read_text())
        assert config[rundir.ROLES_KEY] == ["proposer", "verifier"] and config[rundir.PARALLEL_ROLE_KEY] is None
        done = json.loads((d / rundir.DONE_JSON).read_text())
        assert done["steps_done"] == SCHEDULE["max_steps"] and done["config_hash"] == config["config_hash"]
        train = pd.read_parquet(d / rundir.TRAIN_PARQUET)  # written by the trainer's own process
        shared = run.endswith("-shared-s0")
        assert dict(zip(train["role"], train["policy"])) == {r: "shared" if shared else r for r in SecondOpinion.roles}
        evals = pd.read_parquet(d / rundir.EVAL_PARQUET)
        assert {"verifier_accept_rate", "verifier_parse_rate"} <= set(evals.columns), run
    summary = pd.read_parquet(results / "summary.parquet")
    assert sorted(summary["run"]) == sorted(RUNS) and set(summary["workflow"]) == {NAME}
    gradients = pd.read_parquet(results / "analysis" / "gradients.parquet")
    assert set(gradients["role"]) == {"proposer", "verifier"}
    amplification = pd.read_parquet(results / "analysis" / "amplification.parquet")
    assert not amplification["group_role"].any()  # config.json: no parallel role
    for name in (
        "accuracy_curves",
        "peak_vs_terminal",
        "gain_heatmaps",
        "cliffs",
        "isolated_gradients",
        "shared_capture",
    ):
        assert (results / "figures" / f"{name}.png").stat().st_size > 1000, name


@pytest.mark.slow
def test_the_figures_lay_out_the_new_workflow_and_its_roles(sweep_dir):
    import matplotlib.pyplot as plt

    from analysis import figure_data, figures

    data = figure_data.load(sweep_dir / "results")
    grid = figure_data.make_grid(None, data.summary)
    assert grid.workflows == [NAME]
    fig = figures.accuracy_curves(data, grid)
    assert any(NAME in ax.get_title() for ax in fig.axes)
    fig = figures.shared_capture(data, grid)
    labels = {t.get_text() for legend in fig.legends for t in legend.get_texts()}
    assert {"proposer", "verifier"} <= labels
    assert figure_data.role_colour("proposer") != figure_data.role_colour("verifier")
    plt.close("all")


def test_its_name_appears_in_this_file_only():
    assert WORKFLOWS[NAME] is SecondOpinion
    proc = subprocess.run(["git", "grep", "-l", "-I", "-i", NAME], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        pytest.skip(f"not a git checkout: {proc.stderr.strip()}")
    assert proc.stdout.split() == ["tests/test_fifth_workflow.py"]
