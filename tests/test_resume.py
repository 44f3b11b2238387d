"""Determinism and resume: same seed twice gives the same logs; a resumed run equals an uninterrupted one."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from tests.resilience import assert_nothing_partial, assert_same_logs, published_logs
from tests.runs import tiny_run_config
from trainer.contract.config import config_hash
from trainer.rl.checkpoint_files import seal
from trainer.rl.run import run_training
from trainer.rl.train import ResumeError, Trainer
from trainer.settings import RunSettings
from trainer.sweep.launch import LaunchError, launch, write_run_config

RUN = "voting-math-tiny-isolated-s0"


def run_config(**training):
    return tiny_run_config(RUN, training)


def train(tmp_path, name, base_model, **training):
    run_dir = tmp_path / name
    write_run_config(run_config(**training), base_model, run_dir)
    run_training(run_dir)
    return run_dir


logs = published_logs


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
    assert_nothing_partial(a)
    assert_nothing_partial(b)


@pytest.mark.slow
def test_resume_restores_sampler_position_and_rng(tmp_path, base_model):
    import random

    import numpy as np
    import torch

    run_dir = train(tmp_path, "r", base_model)
    cfg = json.loads((run_dir / "config.json").read_text())
    fresh = Trainer(cfg, tmp_path / "fresh")
    expected = [p.id for p in fresh.prompts_for_step(3)]
    shutil.rmtree(run_dir / "work" / "checkpoints" / "step-000004")
    state = torch.load(run_dir / "work" / "checkpoints" / "step-000002" / "state.pt", weights_only=False)
    assert (
        state["sampler"]["next_step"] == 3 and state["sampler"]["position"] == 2 * cfg["training"]["prompts_per_step"]
    )
    resumed = Trainer(cfg, run_dir)
    random.seed(12345)  # whatever the process did before, the resume restores the saved states
    torch.manual_seed(12345)
    np.random.seed(12345)
    assert resumed.resume() == 2
    assert torch.equal(torch.get_rng_state(), state["rng"]["torch"])
    assert random.getstate() == state["rng"]["python"]
    assert np.array_equal(np.random.get_state()[1], state["rng"]["numpy"][1])
    assert [p.id for p in resumed.prompts_for_step(3)] == expected  # the sampler continues where it stood
    state["sampler"]["position"] += 1  # a checkpoint whose sampler disagrees with the config is refused
    torch.save(state, run_dir / "work" / "checkpoints" / "step-000002" / "state.pt")
    seal(run_dir / "work" / "checkpoints" / "step-000002")  # as if written so: its manifest agrees, it is not damage
    with pytest.raises(ResumeError, match="sampler position"):
        Trainer(cfg, run_dir).resume()


@pytest.mark.slow
def test_trainer_builds_from_settings_of_a_written_config_json(tmp_path, base_model):
    """config.json as `trainer launch` writes it reads into RunSettings (analysis and resumes read old
    ones), a Trainer is built from those settings, and its checkpoint keeps config.json byte for byte."""
    run_dir = tmp_path / "s"
    written = write_run_config(run_config(), base_model, run_dir)
    on_disk = json.loads((run_dir / "config.json").read_text())
    assert on_disk == written and config_hash(on_disk) == on_disk["config_hash"]
    settings = RunSettings.from_dict(on_disk)
    assert settings.training.max_steps == on_disk["training"]["max_steps"] and settings.run == RUN
    assert settings.task_params.eval[0].source == on_disk["task_params"]["eval"][0]["source"]
    trainer = Trainer(settings, run_dir)
    assert trainer.routing == {"generator": "generator", "aggregator": "aggregator"}
    trainer.checkpoint(1)
    saved = run_dir / "work" / "checkpoints" / "step-000001" / "config.json"
    assert saved.read_bytes() == (run_dir / "config.json").read_bytes()
    assert Trainer(settings, run_dir).resume() == 1


@pytest.mark.slow
def test_changed_config_refuses_to_resume_naming_the_key(tmp_path, base_model):
    run_dir = train(tmp_path, "c", base_model)
    (run_dir / "done.json").unlink()
    write_run_config(run_config(learning_rate=0.5), base_model, run_dir)
    with pytest.raises(ResumeError, match=r"changed: training\.learning_rate"):
        run_training(run_dir)
    run_training(run_dir, restart=True)
    assert json.loads((run_dir / "done.json").read_text())["steps_done"] == 4
    assert_nothing_partial(run_dir)


@pytest.mark.slow
def test_changed_config_is_refused_by_the_launcher_and_cli_before_submitting(
    tmp_path, base_model, base_model_json, capsys
):
    from trainer.__main__ import main

    run_dir = train(tmp_path, "l", base_model)
    old_config = (run_dir / "config.json").read_text()
    changed = run_config(learning_rate=0.5)
    changed["launcher"]["backend"] = "debug"
    with pytest.raises(LaunchError, match=r"changed: training\.learning_rate.*--restart.*restart=RUN"):
        launch(changed, base_model_json, run_dir)
    argv = [
        "launch",
        "--run-config",
        json.dumps(changed),
        "--base-model",
        str(base_model_json),
        "--run-dir",
        str(run_dir),
    ]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "training.learning_rate" in err and "--restart" in err and "snakemake --config restart=" in err
    assert (run_dir / "config.json").read_text() == old_config  # nothing written, nothing submitted
    assert not (run_dir / "work" / "job.json").exists()
    done = launch(changed, base_model_json, run_dir, restart=True)  # discards the other config's state
    assert done["config_hash"] == json.loads((run_dir / "config.json").read_text())["config_hash"]
    assert json.loads(old_config)["config_hash"] != done["config_hash"]
    assert_nothing_partial(run_dir)
    # a restart request for a run whose state is of the current config resumes it: nothing is lost
    (run_dir / "done.json").unlink()
    launch(changed, base_model_json, run_dir, restart=True)
    assert "resumed from step-000004" in capsys.readouterr().err
    assert_nothing_partial(run_dir)


@pytest.mark.slow
def test_nan_loss_skips_the_step_and_too_many_fail_the_run(tmp_path, base_model, monkeypatch, capsys):
    import trainer.rl.train as train_module
    from trainer.rl import grpo

    real = grpo.selective_log_softmax
    poisoned = {"on": False}
    poison_steps: list[int] = []  # the steps whose log-probs (and so loss) are NaN

    def nan_when_poisoned(logits, tokens):  # every row's, back-propagated or not (zero advantage)
        logps = real(logits, tokens)
        return logps * float("nan") if poisoned["on"] else logps

    real_step = train_module.Trainer.train_step

    def step(self, s):
        poisoned["on"] = s in poison_steps
        return real_step(self, s)

    monkeypatch.setattr(grpo, "selective_log_softmax", nan_when_poisoned)
    monkeypatch.setattr(train_module.Trainer, "train_step", step)
    run_dir = tmp_path / "nan"
    cfg = run_config(max_skipped=1)
    poison_steps[:] = [2]
    write_run_config(cfg, base_model, run_dir)
    run_training(run_dir)
    train = pd.read_parquet(run_dir / "train.parquet")
    assert sorted(train[train["skipped"]]["step"].unique()) == [2]
    assert "step 2: non-finite loss or gradient, update skipped (1 so far)" in capsys.readouterr().err
    assert sorted(train["step"].unique()) == [1, 2, 3, 4]  # training went on after the skipped step
    assert_nothing_partial(run_dir)
    clean = tmp_path / "clean"
    write_run_config(run_config(max_skipped=1), base_model, clean)
    run_training(clean)
    before = pd.read_parquet(clean / "train.parquet")
    assert train[train["step"] == 1]["loss"].tolist() == before[before["step"] == 1]["loss"].tolist()

    poison_steps[:] = [1, 3]
    write_run_config(cfg, base_model, tmp_path / "fail")
    with pytest.raises(train_module.TrainingError, match=r"2 steps skipped .*max_skipped = 1.*\[1, 3\]"):
        run_training(tmp_path / "fail")
    assert not (tmp_path / "fail" / "done.json").exists()
    failure = json.loads((tmp_path / "fail" / "work" / "failure.json").read_text())
    assert failure["error"].startswith("TrainingError: run voting-math-tiny-isolated-s0: 2 steps skipped")
    assert_nothing_partial(tmp_path / "fail", done=False)
