"""Reruns only when results would change: with a finished one-run sweep,
site settings (launcher, resources, poll intervals) schedule no train job; a changed hashed key
schedules it with a reason naming the key; running it without `restart` fails naming the key and
how to restart, and the old run's logs are still there afterwards; with `restart` they are moved
aside, not deleted."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.workflow import snakemake
from trainer.sweep.config import load_yaml
from trainer.sweep.launch import rerun_trigger_items

pytestmark = pytest.mark.slow
RUN = "single-math-tiny-shared-s0"


def one_run_sweep(workdir: Path) -> None:
    """config.yaml of the workdir cut to one tiny run with a short base-model build and schedule."""
    config = load_yaml(workdir / "config.yaml")
    config["matrices"]["one"] = {
        "workflows": [],
        "tasks": ["math"],
        "scales": ["tiny"],
        "policies": ["shared"],
        "seeds": [0],
        "single_baseline": True,
    }
    config["matrix"] = "one"
    config["scales"]["tiny"]["tiny"].update(warm_start_steps=5)
    for o in config["overrides"]:  # the run's learning rate is the top-level one, as on a real scale
        o.get("training", {}).pop("learning_rate", None)
    config["overrides"].append(
        {
            "match": {"scale": "tiny"},
            "training": {
                "max_steps": 2,
                "eval_every": 2,
                "save_every": 2,
                "prompts_per_step": 2,
                "num_generations": 2,
                "eval_problems": 4,
                "samples_per_eval": 2,
            },
        }
    )
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def train_jobs(dry_run: str) -> list[str]:
    """The `rule train:` blocks of a dry-run's output."""
    return re.findall(r"^rule train:\n(.*?)(?=^\S|\Z)", dry_run, flags=re.MULTILINE | re.DOTALL)


def test_trigger_items_leave_out_where_a_run_runs() -> None:
    rc = {
        "run": RUN,
        "training": {"learning_rate": 0.1, "lora": {"r": 4}},
        "launcher": {"partition": "x", "array_window_s": 30},
        "resources": {"gpus": 2},
        "base_model": {"path": "/m"},
    }
    items = rerun_trigger_items(rc)
    assert items["training.learning_rate"] == "training.learning_rate=0.1"
    assert items["training.lora.r"] == "training.lora.r=4"
    assert not any(k.startswith(("launcher", "resources", "base_model")) for k in items)


def test_site_settings_never_rerun_and_a_changed_key_is_named(workdir: Path) -> None:
    one_run_sweep(workdir)
    run_dir = workdir / "results" / "runs" / RUN
    snakemake("--cores", "2", "train_all", cwd=workdir, timeout=300)
    published = {n: pd.read_parquet(run_dir / f"{n}.parquet") for n in ("train", "eval", "samples")}

    site = snakemake(
        "-n",
        "train_all",
        "--config",
        "launcher={backend: slurm, partition: other, poll_interval_s: 3, array_window_s: 30}",
        "scales={tiny: {resources: {cpus: 2, mem_gb: 8, time_min: 30}}}",
        cwd=workdir,
    ).stdout
    assert not train_jobs(site), site
    lr = "training={learning_rate: 0.001}"
    dry = snakemake("-n", "train_all", "--config", lr, cwd=workdir).stdout
    jobs = train_jobs(dry)
    assert len(jobs) == 1 and "Params have changed" in jobs[0], dry
    assert "training.learning_rate=2e-05" in jobs[0] and "training.learning_rate=0.001" in jobs[0], jobs[0]
    assert "launcher" not in jobs[0]

    failed = snakemake("--cores", "1", "train_all", "--config", lr, cwd=workdir, check=False)
    assert failed.returncode != 0
    log = (workdir / "results" / "logs" / "train" / f"{RUN}.log").read_text()
    assert "changed: training.learning_rate" in log and "restart=RUN" in log, log[-2000:]
    kept = sorted((run_dir / "work" / "checkpoints").glob("step-*"))[-1]
    for name, df in published.items():  # Snakemake deleted the published logs; the checkpoint keeps them
        pd.testing.assert_frame_equal(pd.read_parquet(kept / f"{name}.parquet"), df)

    snakemake("--cores", "2", "train_all", "--config", lr, f"restart={RUN}", cwd=workdir, timeout=300)
    aside = list((run_dir / "work" / "superseded").glob("config-*/checkpoints/step-*"))
    assert [p.name for p in aside] == [kept.name]
    pd.testing.assert_frame_equal(pd.read_parquet(aside[0] / "train.parquet"), published["train"])
    assert pd.read_parquet(run_dir / "train.parquet")["lr"].iloc[0] == 0.001
