"""The cost plan against the demo it plans: predicted over actual run time on this machine.

    python -m benchmarks.bench_plan [--workdir DIR] [--base-model MODEL_JSON] [--cores 2]

In a copy of the workflow (a temporary directory unless --workdir): builds the demo's base model (or
copies --base-model's model.json, a tiny model built from the same spec), runs `python -m trainer plan
--measure` (two steps of one run per workflow and task, recorded in trainer/sweep/measured_rates/<this CPU>.json),
takes the plan, runs the demo with `snakemake --cores N`, and prints, per run and in total, the
predicted seconds over the actual ones (each train job's Snakemake benchmark, start-up included), and
the predicted wall time of the training against the demo's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.workflow import copy_workflow  # noqa: E402

BIN = Path(sys.executable).parent


def timed(cmd: list[str], cwd: Path) -> float:
    """Run a command (its output shown as it goes); its seconds; fail loudly if it fails."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, check=True)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", default=None, help="where to run the demo (default: a temporary directory)")
    parser.add_argument("--base-model", default=None, help="a tiny model.json to use instead of building one")
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(args.workdir or tmp)
        d.mkdir(parents=True, exist_ok=True)
        copy_workflow(d)
        model = d / "results" / "models" / "tiny" / "model.json"
        if args.base_model:
            model.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(args.base_model, model)
        else:
            timed([str(BIN / "snakemake"), "--cores", str(args.cores), str(model.relative_to(d))], d)
        py = [sys.executable, "-m", "trainer", "plan", "--parallel", str(args.cores)]
        measure_s = timed(py + ["--measure", "--out", "results/plan_before.csv"], d)
        demo_s = timed([str(BIN / "snakemake"), "--cores", str(args.cores)], d)
        before = pd.read_csv(d / "results" / "plan_before.csv").set_index("run")
        after = pd.read_csv(d / "results" / "tables" / "plan_vs_actual.csv").set_index("run")
        report(before, after, measure_s, demo_s, args.cores)


def report(before: pd.DataFrame, after: pd.DataFrame, measure_s: float, demo_s: float, cores: int) -> None:
    """Predicted (the plan taken before the demo) over actual, per run and in total."""
    from trainer.sweep.cost import wall_time_s
    from trainer.sweep.measured import cpu_name

    df = before[["run_s", "step_s"]].join(after[["actual_s", "actual_step_s"]])
    df["ratio"] = df["run_s"] / df["actual_s"]
    df["step_ratio"] = df["step_s"] / df["actual_step_s"]
    print(f"\ncost plan vs the demo on {cpu_name()} ({cores} runs at once); plan --measure took {measure_s:.0f} s")
    print(df.to_string(float_format=lambda v: f"{v:.2f}"))
    predicted_wall = wall_time_s(df["run_s"].tolist(), cores)
    print(
        f"\ntotal run time: predicted {df['run_s'].sum():.0f} s, actual {df['actual_s'].sum():.0f} s, "
        f"predicted/actual {df['run_s'].sum() / df['actual_s'].sum():.2f} (per run "
        f"{df['ratio'].min():.2f}-{df['ratio'].max():.2f}); step time predicted/actual "
        f"{df['step_s'].mean() / df['actual_step_s'].mean():.2f}"
    )
    print(
        f"training wall time: predicted {predicted_wall:.0f} s; the whole demo (training, analysis, figures) "
        f"took {demo_s:.0f} s"
    )


if __name__ == "__main__":
    main()
