"""The peak model kept: one smoothed-peak definition for trainer and analysis; a tiny run
whose accuracy peaks and then falls keeps its peak policies, across a SIGKILL and resume; `python -m trainer
export --which peak` writes adapters that, loaded with PEFT on the base model, reproduce the peak eval.

The tiny run: single-workflow code, Isolated-Policy, an eval after every step, on a planted base model
(tests/planted.py): the code model of tests/test_demo_learning.py, damaged so that it gets every problem
wrong; after step 1 its adapter's planted factors restore the original model (accuracy about 0.5), after
every later step they double the damage (accuracy 0). The GRPO updates, evals, checkpoints and the resume
run for real in between. So the curve is 0, a, 0, 0, 0, 0, 0 on any CPU where the original model gets one
of the 24 eval problems right: the smoothed peak at step 1, by construction, then the fall.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.curves import summarize_curve
from tests.float_order import trainer_env
from tests.models import damaged_tiny_base_model
from tests.resilience import assert_same_logs, progress_step, published_logs, wait_for
from tests.runs import tiny_run_config
from tests.workflow import ROOT
from trainer.__main__ import main as trainer_main
from trainer.contract import rundir
from trainer.contract.config import config_hash
from trainer.contract.peak import PEAK_WINDOW_KEY, curve_peak, peak_index, smooth
from trainer.contract.runid import parse_run_id
from trainer.sweep.config import load_yaml, resolve_run_config
from trainer.sweep.launch import write_run_config

RUN = "single-code-tiny-isolated-s0"
SCHEDULE = {"max_steps": 6, "eval_every": 1, "save_every": 2, "keep_last": 2}
RESTORED_UNTIL = 1  # the planted schedule: the original model after step 1 only


# -- the definition, shared ---------------------------------------------------------------------
def test_smooth_is_the_trailing_nan_ignoring_mean_the_analysis_used():
    rng = np.random.default_rng(0)
    values = rng.random(40)
    values[[3, 4, 17]] = np.nan
    for window in (1, 2, 3, 5):
        # the analysis' former code
        expected = pd.Series(values).rolling(window, min_periods=1).mean().to_numpy(copy=True)
        expected[np.isnan(values)] = np.nan
        np.testing.assert_allclose(smooth(values.tolist(), window), expected, rtol=1e-12, equal_nan=True)


def test_peak_is_the_first_maximum_of_the_smoothed_curve():
    assert peak_index([0.1, 0.3, math.nan, 0.3, 0.2]) == 1
    assert peak_index([math.nan, math.nan]) is None
    top = curve_peak([0, 10, 20, 30], [0.1, 0.5, 0.1, 0.4], window=2)
    assert top == {"step": 10, "accuracy": 0.5, "smoothed": 0.3, "index": 1}
    assert curve_peak([0, 10, 20, 30], [0.1, 0.5, 0.1, 0.4], window=1)["step"] == 10
    assert curve_peak([0, 10], [math.nan, math.nan], window=2) is None
    s = summarize_curve(np.array([0, 10, 20, 30]), np.array([0.1, 0.5, 0.1, 0.4]), smoothing_window=2)
    assert (s["peak_step"], s["peak_acc"]) == (10, 0.3)


def test_the_analysis_window_reaches_the_run_config_unhashed_and_only_when_set():
    config = load_yaml(ROOT / "config.yaml")
    run = parse_run_id(RUN)
    default = resolve_run_config(config, run)
    assert PEAK_WINDOW_KEY not in default  # config.json of existing runs unchanged
    wider = resolve_run_config({**config, "analysis": {**config["analysis"], "smoothing_window": 3}}, run)
    assert wider[PEAK_WINDOW_KEY] == 3 and config_hash(wider) == config_hash(default)


# -- a tiny run that peaks and falls -------------------------------------------------------------
@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    return json.loads(damaged_tiny_base_model(tmp_path_factory, 300, ("code",), ("single",)).read_text())


def train(run_dir, base_model):
    """The run trained to its end under the planted schedule, in a subprocess as the killed run below:
    the damaged model's garbage is sampled from huge logits, whose last bits differ between the pytest
    process and a fresh one, while two fresh processes agree exactly."""
    write_run_config(tiny_run_config(RUN, SCHEDULE), base_model, run_dir)
    log = run_dir.parent / f"{run_dir.name}.log"
    proc = start_planted_trainer(run_dir, log)
    assert proc.wait(timeout=600) == 0, log.read_text()[-3000:]
    return run_dir


def start_planted_trainer(run_dir: Path, log: Path, **env: str) -> subprocess.Popen:
    """The run trained under the planted schedule in a subprocess (`python -m tests.planted`)."""
    with open(log, "a") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.planted", str(run_dir), str(RESTORED_UNTIL)],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=trainer_env(**env),
        )


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, base_model):
    return train(tmp_path_factory.mktemp("peak") / RUN, base_model)


@pytest.mark.slow
@pytest.mark.trajectory
def test_a_run_that_peaks_and_falls_keeps_its_peak(run_dir):
    done = json.loads((run_dir / rundir.DONE_JSON).read_text())
    evals = pd.read_parquet(run_dir / rundir.EVAL_PARQUET)
    peak = done["peak"]
    # the analysis' peak is the trainer's
    s = summarize_curve(evals["step"].to_numpy(), evals["accuracy"].to_numpy(), smoothing_window=2)
    assert peak["step"] == s["peak_step"] and peak["smoothed"] == s["peak_acc"]
    assert peak["accuracy"] == evals.set_index("step").loc[peak["step"], "accuracy"]
    # it peaked and fell: the peak is neither the base model nor the last step, and the end is below it
    curve = evals["accuracy"].tolist()
    print(f"margins: accuracy curve {curve}")  # docs/testing.md's record over float orders (`pytest -rP`)
    assert curve[0] == 0 and curve[1] > 0 and curve[2:] == [0] * (len(curve) - 2), curve  # the planted shape
    assert peak["step"] == RESTORED_UNTIL and 0 < peak["step"] < SCHEDULE["max_steps"], curve
    assert s["terminal_acc"] < peak["smoothed"] and evals["accuracy"].iloc[-1] < peak["accuracy"]
    # kept besides the last keep_last checkpoints (the peak's step is none of them), and published
    steps = [int(p.name.split("-")[1]) for p in rundir.checkpoints(run_dir / rundir.WORK_DIR)]
    assert steps == [4, 6] and peak["step"] not in steps
    assert peak["path"] == "peak/policies"
    assert (run_dir / peak["path"] / "generator" / "adapter_model.safetensors").exists()
    assert [p.name for p in (run_dir / "work" / "peak").iterdir()] == [f"step-{peak['step']:06d}"]


def eval_with_exported(run_dir, out, step):
    """Eval at `step` (its seed) with the exported adapters loaded by PEFT on the base model: the trainer's
    eval code path, its LoRA weights replaced by the loaded ones. The primary split's accuracy."""
    from peft import PeftModel, get_peft_model_state_dict, set_peft_model_state_dict
    from transformers import AutoModelForCausalLM

    from trainer.rl.train import Trainer

    cfg = json.loads((run_dir / rundir.CONFIG_JSON).read_text())
    trainer = Trainer(cfg, out.parent / f"eval-{out.name}")
    for policy in trainer.policies:
        base = AutoModelForCausalLM.from_pretrained(cfg["base_model"]["path"])
        loaded = PeftModel.from_pretrained(base, out / policy.name)
        result = set_peft_model_state_dict(
            trainer.policies.peft, get_peft_model_state_dict(loaded), adapter_name=policy.name
        )
        assert not [k for k in result.missing_keys if "lora_" in k and f".{policy.name}." in k]
    trainer.evaluate(step)
    return trainer.eval_rows[0]["accuracy"]


@pytest.mark.slow
@pytest.mark.trajectory
def test_exported_peak_adapters_reproduce_the_peak_eval(run_dir, tmp_path):
    done = json.loads((run_dir / rundir.DONE_JSON).read_text())
    out = tmp_path / "peak"
    assert trainer_main(["export", "--run-dir", str(run_dir), "--which", "peak", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "generator"]  # isolated: one adapter per role
    card = (out / "README.md").read_text()
    assert RUN in card and f"step: {done['peak']['step']} " in card and f"{done['peak']['accuracy']:.4f}" in card
    assert eval_with_exported(run_dir, out, done["peak"]["step"]) == done["peak"]["accuracy"]
    # the last model is another: its export reproduces the last eval, not the peak's
    last = tmp_path / "last"
    assert trainer_main(["export", "--run-dir", str(run_dir), "--which", "last", "--out", str(last)]) == 0
    evals = pd.read_parquet(run_dir / rundir.EVAL_PARQUET).set_index("step")["accuracy"]
    assert evals.loc[SCHEDULE["max_steps"]] != done["peak"]["accuracy"]
    assert eval_with_exported(run_dir, last, SCHEDULE["max_steps"]) == evals.loc[SCHEDULE["max_steps"]]


@pytest.mark.slow
@pytest.mark.trajectory
def test_the_peak_survives_a_kill_and_resume(run_dir, tmp_path, base_model):
    b = tmp_path / RUN
    write_run_config(tiny_run_config(RUN, SCHEDULE), base_model, b)
    log = tmp_path / "train.log"
    proc = start_planted_trainer(b, log, TRAINER_TEST_PAUSE_AT="step", TRAINER_TEST_PAUSE_S="1.5")
    wait_for(lambda: progress_step(b) >= 3, proc, 300, "step 3", log)  # past the peak (step 1) and step-2's checkpoint
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert [p.name for p in rundir.checkpoints(b / rundir.WORK_DIR)] == ["step-000002"]
    assert start_planted_trainer(b, log).wait(timeout=600) == 0, log.read_text()[-3000:]  # resumes from step 2
    peak_a = json.loads((run_dir / rundir.DONE_JSON).read_text())["peak"]
    assert json.loads((b / rundir.DONE_JSON).read_text())["peak"] == peak_a
    adapter = "peak/policies/generator/adapter_model.safetensors"
    assert (b / adapter).read_bytes() == (run_dir / adapter).read_bytes()
    assert_same_logs(published_logs(b), published_logs(run_dir))


@pytest.mark.slow
def test_export_errors_name_the_problem(tmp_path, capsys, run_dir):
    def export(run, which="peak", out=None):
        code = trainer_main(["export", "--run-dir", str(run), "--which", which, "--out", str(out or tmp_path / "x")])
        return code, capsys.readouterr().err

    (tmp_path / "unfinished").mkdir()
    code, err = export(tmp_path / "unfinished")
    assert code == 1 and "no done.json" in err and "not finished" in err
    code, err = export(run_dir, which="best")
    assert code == 1 and "--which: 'best' is not one of peak, last" in err
    old = tmp_path / "old"
    shutil.copytree(run_dir, old)
    done = json.loads((old / rundir.DONE_JSON).read_text())
    del done["peak"]
    (old / rundir.DONE_JSON).write_text(json.dumps(done))
    code, err = export(old)
    assert code == 1 and "no `peak`" in err and "--which last" in err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("")
    code, err = export(run_dir, out=tmp_path / "full")
    assert code == 1 and "not empty" in err


class FakePolicies:
    """Stands in for PolicySet: save writes which weights were current."""

    def __init__(self):
        self.weights = "w0"

    def save(self, directory: str) -> None:
        Path(directory, "generator").mkdir(parents=True)
        Path(directory, "generator", "w").write_text(self.weights)


def test_peak_keeper_moves_with_the_peak_and_a_resume_restores_the_checkpoints_peak(tmp_path):
    from trainer.rl.peak_keeper import PeakKeeper

    work, policies, rows = tmp_path / "work", FakePolicies(), []
    keeper = PeakKeeper(work, "s", window=1)

    def eval_at(step, acc):
        policies.weights = f"w{step}"
        rows.append({"step": step, "split": "s", "accuracy": acc})
        rows.append({"step": step, "split": "other", "accuracy": 1.0})  # not the primary split: ignored
        keeper.observe(rows, step, policies)

    def kept():
        return [(p.name, (p / "policies" / "generator" / "w").read_text()) for p in sorted((work / "peak").iterdir())]

    eval_at(0, 0.2)
    eval_at(1, 0.5)
    assert kept() == [("step-000001", "w1")]
    keeper.link_into(tmp_path / "ckpt1")  # a checkpoint after step 1
    eval_at(2, 0.4)  # below the peak: nothing moves
    eval_at(3, 0.6)
    assert kept() == [("step-000003", "w3")] and keeper.current["accuracy"] == 0.6
    # killed after step 3; resumed from the checkpoint of step 1: its peak, not the newer one
    resumed = PeakKeeper(work, "s", window=1)
    resumed.restore(tmp_path / "ckpt1")
    assert kept() == [("step-000001", "w1")] and resumed.current["step"] == 1
    published = resumed.publish(tmp_path / "run")
    assert published["path"] == "peak/policies" and published["step"] == 1
    assert (tmp_path / "run" / published["path"] / "generator" / "w").read_text() == "w1"
    resumed.restore(None)  # a fresh start keeps no peak
    assert kept() == [] and resumed.publish(tmp_path / "run2") is None
