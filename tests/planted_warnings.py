"""The trainer's early-warning detectors judged on planted synthetic runs (tests/synthetic_logs.py): each
run's warnings.parquet computed from its train.parquet (trainer/early_warning.py), its cliff step found
by analysis/curves.py, and analysis/warnings_judged.py's table over the runs. benchmarks/bench_warnings.py
prints the table."""

from __future__ import annotations

import itertools
from pathlib import Path

import pandas as pd

from analysis.curves import summarize_curve
from analysis.warnings_judged import judge
from tests.synthetic_logs import planted_run
from trainer.contract import rundir
from trainer.early_warning import DETECTOR_NAMES, warnings_from_train


def judged_planted_runs(out: Path, steps: int, seeds: int) -> tuple[pd.DataFrame, int]:
    """The judged table over the planted runs of 3 workflows x 2 tasks x 2 policies x `seeds`; and the run count."""
    runs = []
    cells = itertools.product(
        ["eval_opt", "voting", "orch_workers"], ["math", "code"], ["shared", "isolated"], range(seeds)
    )
    for wf, task, policy, seed in cells:
        run = f"{wf}-{task}-qwen3-0.6b-{policy}-s{seed}"
        planted_run(out / run, run, steps=steps)
        warnings = warnings_from_train(pd.read_parquet(out / run / rundir.TRAIN_PARQUET))
        rundir.write_parquet_atomic(
            rundir.to_table(warnings, rundir.WARNINGS_SCHEMA), out / run / rundir.WARNINGS_PARQUET
        )
        evals = pd.read_parquet(out / run / rundir.EVAL_PARQUET)
        curve = summarize_curve(evals["step"].to_numpy(), evals["accuracy"].to_numpy(), smoothing_window=2)
        runs.append({"cliff_step": curve["cliff_step"], "warnings": warnings})
    return judge(runs, DETECTOR_NAMES), len(runs)
