"""Bad configs, table-driven: each fails at `snakemake -n`, before any job, naming the key path and the bad value.

Every case edits a copy of config.yaml (the `workdir` fixture), so a case is the smallest change
a user could make; the expected fragments are the key path and the offending value or key.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.workflow import snakemake

Config = dict[str, Any]


def _set(path: str, value: Any) -> Callable[[Config], None]:
    """A mutation that sets the dotted `path` (list indices as digits) to `value`."""

    def mutate(config: Config) -> None:
        *parents, last = path.split(".")
        node: Any = config
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(last) if isinstance(node, list) else last] = value

    return mutate


def _drop(path: str) -> Callable[[Config], None]:
    """A mutation that deletes the dotted `path`."""

    def mutate(config: Config) -> None:
        *parents, last = path.split(".")
        node: Any = config
        for key in parents:
            node = node[key]
        del node[last]

    return mutate


def _tiny_training(**values: Any) -> Callable[[Config], None]:
    """A mutation that sets `values` in the tiny scale's override (the demo's runs), where the demo reads them."""

    def mutate(config: Config) -> None:
        next(o for o in config["overrides"] if o["match"] == {"scale": "tiny"})["training"].update(values)

    return mutate


HF_TRAIN = "tasks.math.train"
# (case id, mutation of config.yaml, fragments the error must contain)
CASES: list[tuple[str, Callable[[Config], None], list[str]]] = [
    ("policy typo", _set("matrices.demo.policies", ["shraed"]), ["matrices.demo.policies.0", "'shraed'"]),
    ("negative seed", _set("matrices.demo.seeds", [-1, "x"]), ["matrices.demo.seeds.0", "-1"]),
    ("string seed", _set("matrices.demo.seeds", [0, "x"]), ["matrices.demo.seeds.1", "'x'"]),
    ("no tasks", _set("matrices.demo.tasks", []), ["matrices.demo.tasks", "[]"]),
    (
        "eval entry typo",
        _set("tasks.math.eval", [{"sourc": "hf", "bogus": 1}]),
        ["tasks.math.eval.0.sourc: unknown key", "tasks.math.eval.0.bogus: unknown key", "'source' is a required"],
    ),
    ("unknown training key", _set("training.learning_rat", 1e-5), ["training.learning_rat: unknown key"]),
    ("negative learning rate", _set("training.learning_rate", -1e-5), ["training.learning_rate", "-1e-05"]),
    ("hf source without path", _drop(f"{HF_TRAIN}.path"), [HF_TRAIN, "'path' is a required property"]),
    (
        "field of another source type",
        _set(f"{HF_TRAIN}.dataset", "gsm8k"),
        [f"{HF_TRAIN}.dataset: not a field of this source type"],
    ),
    (
        "reasoning_gym without dataset",
        _set("tasks.code.eval", [{"name": "g", "source": "reasoning_gym", "size": 3}]),
        ["tasks.code.eval.0", "'dataset' is a required property"],
    ),
    (
        "policy_groups missing a role",
        _set("training.policy_groups", {"one": ["generator"]}),
        ["training.policy_groups", "'evaluator'", "missing"],
    ),
    (
        "matrix of no runs",
        lambda c: c["matrices"]["demo"].update(policies=[], single_baseline=False),
        ["matrices.demo: a matrix of 0 runs"],
    ),
    (
        "unknown workflow",
        _set("matrices.demo.workflows", ["votnig"]),
        ["matrices.demo.workflows", "'votnig' has no entry in `workflows`"],
    ),
    ("target_modules not a name", _set("training.lora.target_modules", 7), ["training.lora.target_modules", "7"]),
    ("bad enum", _set("training.loss_type", "ppo"), ["training.loss_type", "'ppo'"]),
    ("unknown launcher key", _set("launcher.poll_interval", 1), ["launcher.poll_interval: unknown key"]),
    ("job arrays without slurm", _set("launcher.array_window_s", 30), ["launcher.array_window_s", "'local'"]),
    ("analysis window zero", _set("analysis.smoothing_window", 0), ["analysis.smoothing_window", "0"]),
    (
        "variant delta key typo",
        _set("matrices.paper_ablations.variants.per_role", {"training": {"reward_mod": "per_role"}}),
        ["matrices.paper_ablations.variants.per_role.training.reward_mod: unknown key"],
    ),
    ("eval_problems neither int nor all", _set("training.eval_problems", "most"), ["training.eval_problems", "'most'"]),
    ("split eval_problems zero", _set("tasks.math.eval.1.eval_problems", 0), ["tasks.math.eval.1.eval_problems", "0"]),
    ("eval_problems on the train source", _set(f"{HF_TRAIN}.eval_problems", "all"), [f"{HF_TRAIN}.eval_problems"]),
    (
        "several greedy eval samples",
        _tiny_training(eval_samples=3, eval_temperature=0),
        ["training.eval_samples: 3", "training.eval_temperature is 0", "voting-math-tiny-shared-s0"],
    ),
]


@pytest.mark.parametrize("mutate, fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_config_fails_at_dry_run(workdir: Path, mutate: Callable[[Config], None], fragments: list[str]) -> None:
    """The dry run fails, names the key and the value, and plans no job."""
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    mutate(config)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    proc = snakemake("-n", "--cores", "1", cwd=workdir, check=False, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"the bad config passed:\n{out}"
    assert "invalid config" in out, out
    for fragment in fragments:
        assert fragment in out, f"{fragment!r} not in:\n{out}"
    assert "Job stats" not in out and not (workdir / "results").exists(), "a job was planned or run"
