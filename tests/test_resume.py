"""Determinism and resume: same seed twice gives the same logs; a resumed run equals an uninterrupted one."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from tests.conftest import ROOT
from trainer.base_model import build_base_model
from trainer.config import base_model_spec, load_yaml, resolve_run_config
from trainer.launch import write_run_config
from trainer.runid import parse_run_id
from trainer.schema import TIME_COLUMNS
from trainer.train import ResumeError, run_training

RUN = "voting-math-tiny-isolated-s0"


@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    config = load_yaml(ROOT / "config.yaml")
    spec = base_model_spec(config, "tiny", ["math"])
    spec["tiny"]["warm_start_steps"] = 100
    return build_base_model(spec, tmp_path_factory.mktemp("model") / "model.json")


def run_config(**training):
    config = load_yaml(ROOT / "config.yaml")
    rc = resolve_run_config(config, parse_run_id(RUN))
    rc["training"].update(max_steps=4, eval_every=2, save_every=2, keep_last=3, prompts_per_step=4,
                          num_generations=4, eval_problems=24, samples_per_eval=2, **training)
    return rc


def train(tmp_path, name, base_model, **training):
    run_dir = tmp_path / name
    write_run_config(run_config(**training), base_model, run_dir)
    run_training(run_dir)
    return run_dir


def logs(run_dir):
    out = {}
    for name in ("train", "eval", "samples"):
        df = pd.read_parquet(run_dir / f"{name}.parquet")
        out[name] = df.drop(columns=[c for c in TIME_COLUMNS if c in df.columns])
    return out


def assert_same_logs(a, b):
    for name in a:
        pd.testing.assert_frame_equal(a[name], b[name], check_exact=True, obj=name)


@pytest.mark.slow
def test_same_seed_twice_and_resume_give_identical_logs(tmp_path, base_model):
    a = train(tmp_path, "a", base_model)
    b = train(tmp_path, "b", base_model)
    assert_same_logs(logs(a), logs(b))
    train_a = pd.read_parquet(a / "train.parquet")
    assert set(train_a["policy"]) == {"generator", "aggregator"}  # isolated: a policy per role
    # b dies after its step-2 checkpoint: later checkpoints and published files are lost
    shutil.rmtree(b / "work" / "checkpoints" / "step-000004")
    for name in ("train.parquet", "eval.parquet", "samples.parquet", "done.json"):
        (b / name).unlink()
    run_training(b)
    assert_same_logs(logs(a), logs(b))
    assert json.loads((b / "done.json").read_text())["steps_done"] == 4


@pytest.mark.slow
def test_changed_config_refuses_to_resume_naming_the_key(tmp_path, base_model):
    run_dir = train(tmp_path, "c", base_model)
    (run_dir / "done.json").unlink()
    write_run_config(run_config(learning_rate=0.5), base_model, run_dir)
    with pytest.raises(ResumeError, match=r"changed: training\.learning_rate"):
        run_training(run_dir)
    run_training(run_dir, restart=True)
    assert json.loads((run_dir / "done.json").read_text())["steps_done"] == 4


@pytest.mark.slow
def test_nan_loss_skips_the_step_and_too_many_fail_the_run(tmp_path, base_model, monkeypatch):
    import trainer.train as train_module
    from trainer.grpo import LOSS_AGGREGATIONS

    real = LOSS_AGGREGATIONS["dapo"]
    poisoned = {"on": False}

    def nan_when_poisoned(per_token, mask, totals):
        loss = real(per_token, mask, totals)
        return loss * float("nan") if poisoned["on"] else loss

    real_step = train_module.Trainer.train_step

    def step(self, s):
        poisoned["on"] = s in self.t.get("poison_steps", [])
        return real_step(self, s)

    monkeypatch.setitem(LOSS_AGGREGATIONS, "dapo", nan_when_poisoned)
    monkeypatch.setattr(train_module.Trainer, "train_step", step)
    run_dir = tmp_path / "nan"
    cfg = run_config(max_skipped=1)
    cfg["training"]["poison_steps"] = [2]
    write_run_config(cfg, base_model, run_dir)
    run_training(run_dir)
    train = pd.read_parquet(run_dir / "train.parquet")
    assert sorted(train[train["skipped"]]["step"].unique()) == [2]
    clean = tmp_path / "clean"
    write_run_config(run_config(max_skipped=1), base_model, clean)
    run_training(clean)
    before = pd.read_parquet(clean / "train.parquet")
    assert train[train["step"] == 1]["loss"].tolist() == before[before["step"] == 1]["loss"].tolist()

    cfg["training"]["poison_steps"] = [1, 3]
    write_run_config(cfg, base_model, tmp_path / "fail")
    with pytest.raises(train_module.TrainingError, match=r"2 steps skipped .*max_skipped = 1.*\[1, 3\]"):
        run_training(tmp_path / "fail")
    assert not (tmp_path / "fail" / "done.json").exists()
