"""The `cliffs` matrix (issue 22): tiny runs configured to cliff, defined in config.yaml; dry-run only here
(running it takes both cores for ~30 minutes)."""

from __future__ import annotations

import re

from tests.conftest import snakemake
from trainer.contract.runid import parse_run_id
from trainer.sweep.config import expand_matrix, load_yaml, resolve_run_config


def test_cliffs_matrix_dag_has_its_runs_with_the_hot_schedule(workdir):
    config = load_yaml(workdir / "config.yaml")
    runs = [str(r) for r in expand_matrix(config, "cliffs")]
    assert len(runs) == 12 and all("-tiny-cliffs-" in r for r in runs)
    demo = resolve_run_config(config, parse_run_id("voting-code-tiny-isolated-s0"))["training"]
    hot = resolve_run_config(config, parse_run_id("voting-code-tiny-cliffs-isolated-s0"))["training"]
    assert hot["learning_rate"] == 5 * demo["learning_rate"] and hot["max_steps"] > demo["max_steps"]
    # apart from the schedule, the same tiny demo settings
    assert {k: v for k, v in hot.items() if k not in ("learning_rate", "max_steps", "eval_every")} == {
        k: v for k, v in demo.items() if k not in ("learning_rate", "max_steps", "eval_every")
    }
    dry = snakemake("-n", "--config", "matrix=cliffs", cwd=workdir).stdout
    trains = re.findall(r"rule train:.*?wildcards: run=(\S+)", dry, flags=re.S)
    assert sorted(trains) == sorted(runs)
    assert "results/models/tiny-cliffs/model.json" in dry
