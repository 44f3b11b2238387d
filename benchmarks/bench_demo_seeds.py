"""The embedded demo on several base models: in how many multi-agent cells RL beats its base beyond
noise at peak, per base model (the demo's own summary table, results/tables/summary.csv).

Usage: python benchmarks/bench_demo_seeds.py MODEL_JSON [MODEL_JSON ...] [--min-cells 8] [--keep DIR]

Each MODEL_JSON is a tiny base model's model.json (e.g. from benchmarks/bench_warm_start.py's
builds); the demo runs as `snakemake --cores 2` in a copy of this workflow with that model in
place of the tiny scale's, so only the 14 runs, the analysis and the figures run. Prints each
model's count and cells; exits 1 when a count is below --min-cells.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.workflow import copy_workflow  # noqa: E402


def run_demo(model_json: Path, dest: Path) -> tuple[Path, float]:
    """The demo's summary.csv on `model_json`, and the seconds the demo took."""
    dest.mkdir(parents=True, exist_ok=True)
    copy_workflow(dest)
    target = dest / "results" / "models" / "tiny" / "model.json"
    target.parent.mkdir(parents=True)
    shutil.copy(model_json, target)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    t0 = time.perf_counter()
    proc = subprocess.run(["snakemake", "--cores", "2"], cwd=dest, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"the demo on {model_json} failed in {dest}:\n{proc.stderr[-3000:]}")
    return dest / "results" / "tables" / "summary.csv", time.perf_counter() - t0


def main(argv: list[str]) -> int:
    """Run the demo on each model and count its cells."""
    import pandas as pd

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", type=Path, nargs="+", help="model.json of each base model")
    ap.add_argument("--min-cells", type=int, default=8, help="multi-agent cells each demo must win at peak")
    ap.add_argument("--keep", type=Path, help="keep the demo copies under this directory")
    args = ap.parse_args(argv)
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench_demo_seeds-"))
    failed = 0
    for i, model in enumerate(args.models):
        summary, seconds = run_demo(model.resolve(), root / f"demo{i}")
        table = pd.read_csv(summary)
        multi = table[table["workflow"] != "single"]
        wins = multi[multi["peak_beats_base"] == "yes"]
        cells = ", ".join(f"{r.workflow}x{r.task}x{r.policy}" for r in wins.itertuples())
        base = ", ".join(
            f"{task} {g['base_acc'].min():.2f}-{g['base_acc'].max():.2f}" for task, g in table.groupby("task")
        )
        print(
            f"{model}: RL beats base at peak in {len(wins)} of {len(multi)} multi-agent cells "
            f"(base accuracy {base}; demo {seconds:.0f} s): {cells}",
            flush=True,
        )
        failed += len(wins) < args.min_cells
    if args.keep is None:
        shutil.rmtree(root)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
