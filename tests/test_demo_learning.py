"""Learning happens: one demo cell (single x math at the tiny scale) with a shortened schedule
raises its training reward. The base model is the demo's (config.yaml's tiny scale, math
demonstrations) with a shorter warm start, so that it is right often enough for GRPO to have
signal and wrong often enough to have room; the seed is fixed, so the run is reproducible."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.resilience import tiny_base_model, tiny_run_config
from trainer.launch import write_run_config
from trainer.train import run_training

WARM_START_STEPS = 300
SCHEDULE = {"max_steps": 24, "prompts_per_step": 16, "num_generations": 4, "eval_every": 24, "save_every": 24,
            "eval_problems": 100, "samples_per_eval": 2}
WINDOW = 6  # steps averaged at each end


@pytest.mark.slow
def test_a_demo_cell_learns(tmp_path, tmp_path_factory):
    base = json.loads(tiny_base_model(tmp_path_factory, WARM_START_STEPS).read_text())
    run_dir = tmp_path / "single-math-tiny-shared-s0"
    write_run_config(tiny_run_config("single-math-tiny-shared-s0", SCHEDULE), base, run_dir)
    run_training(run_dir)
    reward = pd.read_parquet(run_dir / "train.parquet").groupby("step")["reward_mean"].mean()
    first, last = reward.iloc[:WINDOW].mean(), reward.iloc[-WINDOW:].mean()
    assert 0.0 < first < 0.9, f"the base model gives GRPO no signal: first-steps reward {first:.3f}"
    assert last > first + 0.1, f"no learning: reward {first:.3f} over the first {WINDOW} steps, {last:.3f} over the last"
    evals = pd.read_parquet(run_dir / "eval.parquet").set_index("step")["accuracy"]
    assert evals.loc[SCHEDULE["max_steps"]] > evals.loc[0], f"eval accuracy did not rise: {evals.to_dict()}"
