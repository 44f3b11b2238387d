"""Learning happens: one demo cell (single x code at the tiny scale) with a shortened schedule
raises its training reward and its eval accuracy.

The base model is the demo's tiny model and warm start (config.yaml: its architecture, learning
rate and imperfect teacher, `flawed_demonstrations`, which writes `print` for `return` in a share
of the solutions), shortened to the single workflow's code demonstrations; the seed is fixed, so
the run is reproducible. The base model then returns the value in some samples and prints it in
others: GRPO has signal from the first step, and learning shows as the printed share falling.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.models import tiny_base_model
from tests.runs import tiny_run_config
from trainer.rl.run import run_training
from trainer.sweep.launch import write_run_config

RUN = "single-code-tiny-shared-s0"
WARM_START_STEPS = 300
# 4 samples of each of the 100 eval problems: one sample each put the base at 0.57 where four put it at
# 0.49, and the rise measured from one sample sat at the threshold's float rounding (0.57 -> 0.67)
SCHEDULE = {
    "max_steps": 16,
    "prompts_per_step": 8,
    "num_generations": 4,
    "eval_every": 16,
    "save_every": 16,
    "eval_problems": 100,
    "eval_samples": 4,
    "samples_per_eval": 100,
}
WINDOW = 4  # steps averaged at each end


@pytest.mark.slow
@pytest.mark.trajectory
def test_a_demo_cell_learns(tmp_path, tmp_path_factory):
    base = json.loads(tiny_base_model(tmp_path_factory, WARM_START_STEPS, ("code",), ("single",)).read_text())
    run_dir = tmp_path / RUN
    write_run_config(tiny_run_config(RUN, SCHEDULE), base, run_dir)
    run_training(run_dir)
    reward = pd.read_parquet(run_dir / "train.parquet").groupby("step")["reward_mean"].mean()
    first, last = reward.iloc[:WINDOW].mean(), reward.iloc[-WINDOW:].mean()
    assert 0.05 < first < 0.8, f"the base model gives GRPO no signal: first-steps reward {first:.3f}"
    assert last > first + 0.15, (
        f"no learning: reward {first:.3f} over the first {WINDOW} steps, {last:.3f} over the last"
    )
    evals = pd.read_parquet(run_dir / "eval.parquet").set_index("step")["accuracy"]
    assert evals.loc[SCHEDULE["max_steps"]] > evals.loc[0] + 0.1, f"eval accuracy did not rise: {evals.to_dict()}"
    # what it learned: to return the value instead of printing it
    samples = pd.read_parquet(run_dir / "samples.parquet")
    printed = samples.groupby("step")["completion"].apply(lambda c: c.str.contains("print(", regex=False).mean())
    # the margins, for docs/testing.md's record over float orders (`pytest -rP` shows them)
    print(
        f"margins: reward {first:.3f} -> {last:.3f}, eval {evals.loc[0]:.3f} -> {evals.iloc[-1]:.3f}, "
        f"printed {printed.iloc[0]:.2f} -> {printed.iloc[-1]:.2f}"
    )
    assert printed.loc[SCHEDULE["max_steps"]] < printed.loc[0], (
        f"share of printed answers per eval: {printed.to_dict()}"
    )
