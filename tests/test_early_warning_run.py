"""Early warning inside a tiny run: warnings.parquet in the run dir, a line in the progress log, and
`training.on_warning: stop` ending the run as done-early (checkpointed, named in done.json)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from analysis.runs import load_run
from tests.models import damaged_tiny_base_model
from tests.runs import tiny_run_config
from trainer.contract import rundir
from trainer.rl.run import run_training
from trainer.rl.train import Trainer
from trainer.sweep.launch import write_run_config
from trainer.sweep.status import run_status

RUN = "voting-math-tiny-isolated-s0"  # isolated: no capture detector
# A planted base model (tests/planted.py) gets every prompt wrong on any CPU: all GRPO groups have zero
# reward variance (and zero gradient), so advantage collapse fires at step 1 under config.yaml's thresholds.
DETECTOR = "advantage_collapse"


@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    return json.loads(damaged_tiny_base_model(tmp_path_factory).read_text())


@pytest.mark.slow
@pytest.mark.trajectory
def test_on_warning_stop_ends_the_run_done_early(tmp_path, base_model):
    run_dir = tmp_path / RUN
    write_run_config(tiny_run_config(RUN, {"on_warning": "stop"}), base_model, run_dir)
    lines: list[str] = []
    cfg = json.loads((run_dir / "config.json").read_text())
    done = Trainer(cfg, run_dir, log=lines.append).fit()
    assert done["steps_done"] == 1 and done["steps_expected"] == 4
    assert done["stopped_early"]["detector"] == DETECTOR and done["stopped_early"]["step"] == 1
    assert json.loads((run_dir / "done.json").read_text()) == done
    assert (run_dir / "work" / "checkpoints" / "step-000001").is_dir()
    assert any(f"WARNING {DETECTOR}" in line for line in lines)
    warnings = pd.read_parquet(run_dir / rundir.WARNINGS_PARQUET)
    assert list(warnings.columns[:5]) == ["step", "role", "detector", "value", "threshold"]
    assert set(warnings["step"]) == {1} and set(warnings["detector"]) == {DETECTOR}
    assert pd.read_parquet(run_dir / "train.parquet")["step"].max() == 1
    assert run_training(run_dir) == done  # a rerun keeps the done-early run, does not train on
    assert run_status(RUN, run_dir, None).state == "done-early"
    assert load_run(run_dir).run == RUN  # the analysis reads a done-early run


@pytest.mark.slow
@pytest.mark.trajectory
def test_on_warning_log_trains_on_and_keeps_every_onset(tmp_path, base_model):
    run_dir = tmp_path / RUN
    write_run_config(tiny_run_config(RUN), base_model, run_dir)
    done = run_training(run_dir)
    assert done["steps_done"] == 4 and "stopped_early" not in done
    warnings = pd.read_parquet(run_dir / rundir.WARNINGS_PARQUET)
    train = pd.read_parquet(run_dir / "train.parquet")
    assert "zero_var_group_share" in train and train["zero_var_group_share"].between(0, 1).all()
    # the collapse starts at step 1 for every role and never ends: one onset each, the run trains on
    collapsed = warnings[warnings["detector"] == DETECTOR]
    assert sorted(collapsed["role"]) == sorted(train["role"].unique()) and set(collapsed["step"]) == {1}
    assert train["zero_var_group_share"].max() == 1.0
