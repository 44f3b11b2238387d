"""The early-warning detectors judged on planted synthetic runs (tests/synthetic_logs.py).

    python -m benchmarks.bench_warnings [--out DIR] [--steps 300] [--seeds 3]

Writes planted runs (cliffs, Shared capture, Isolated amplification planted), computes each run's
warnings.parquet from its train.parquet with the trainer's detectors (trainer/rl/early_warning.py), the
cliff step with analysis/curves.py, and prints analysis/warnings_judged.py's table: per detector, how
often it fired before the cliff, the median lead time and the false-alarm rate on runs without a cliff.
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
from pathlib import Path

import pandas as pd

from analysis.curves import summarize_curve
from analysis.warnings_judged import judge
from tests.synthetic_logs import planted_run
from trainer.contract import rundir
from trainer.rl.early_warning import DETECTOR_NAMES, warnings_from_train


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="where the planted runs go (default: a temporary directory)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        table, n = judged_planted_runs(Path(args.out or tmp), args.steps, args.seeds)
    print(f"early warnings judged on {n} planted runs ({args.steps} steps):")
    print(table.to_string(index=False, float_format=lambda x: f"{x:.2f}"))


if __name__ == "__main__":
    main()
