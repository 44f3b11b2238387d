"""What a warm-start step of the tiny base model costs, an older commit against this tree, side by
side on this machine.

Usage: python benchmarks/bench_warm_start_cost.py [--rev 8951ccf] [--steps 200] [--threads 2]

Both trees (REV from `git archive`, this one in place) build config.yaml's tiny base model with
`python -m trainer base-model`, `warm_start_steps` set to --steps, on --threads threads (the
base_model rule's 2), one after the other; model.json's build_time_s over the steps is the cost
of a step. A whole build costs that times its steps: fixed at 1100 before, until the loss decides
now (benchmarks/bench_warm_start.py prints them).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_warm_start import ENV  # noqa: E402  (the demo's CPU settings)

# the spec as each tree's own config and code resolve it (the module moved after 8951ccf)
SPEC = """
import json, sys
try:
    from trainer.sweep.config import base_model_spec, load_yaml
except ImportError:
    from trainer.config import base_model_spec, load_yaml
spec = base_model_spec(load_yaml("config.yaml"), "tiny", ["math", "code"])
spec["tiny"]["warm_start_steps"] = int(sys.argv[1])
print(json.dumps(spec))
"""


def step_seconds(tree: Path, steps: int, threads: int, out: Path) -> float:
    """Seconds per warm-start step of the tiny build in `tree`."""
    env = {**os.environ, **ENV, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(tree)}
    spec = subprocess.run([sys.executable, "-c", SPEC, str(steps)], cwd=tree, env=env, check=True,
                          capture_output=True, text=True).stdout
    proc = subprocess.run([sys.executable, "-m", "trainer", "base-model", "--spec", spec, "--out",
                           str(out / "model.json")], cwd=tree, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"the build in {tree} failed:\n{proc.stderr[-3000:]}")
    info = json.loads((out / "model.json").read_text())
    return info["build_time_s"] / info["warm_start"]["steps"]


def main(argv: list[str]) -> int:
    """Time both trees and print the ratio."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", default="8951ccf", help="the older commit")
    ap.add_argument("--steps", type=int, default=200, help="warm-start steps timed in each tree")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (the base_model rule's)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        old_tree = Path(tmp) / "old"
        old_tree.mkdir()
        data = subprocess.run(["git", "archive", args.rev], cwd=ROOT, check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(old_tree, filter="data")
        old = step_seconds(old_tree, args.steps, args.threads, Path(tmp) / "old-model")
        new = step_seconds(ROOT, args.steps, args.threads, Path(tmp) / "new-model")
    print(f"{args.rev}: {old:.3f} s per warm-start step; this tree: {new:.3f} s; old / new {old / new:.2f}x "
          f"({args.steps} steps each, {args.threads} threads); a build: {args.rev} 1100 steps = {1100 * old:.0f} s, "
          f"this tree {new:.3f} s x its steps")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
