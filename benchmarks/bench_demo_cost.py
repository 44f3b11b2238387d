"""What the embedded demo costs, this tree against an older commit, side by side on this machine:
the tiny base model's build (warm start) and a train step of one demo run.

Usage: python benchmarks/bench_demo_cost.py [--rev 8951ccf] [--run voting-math-tiny-shared-s0]

Each tree (REV from `git archive`, this one from its tracked and untracked files) is copied to a
temporary directory and runs, through its own Snakefile and config.yaml, as a user's `snakemake`
would: the `tiny` base model (2 cores, the rule's threads), then `--run` alone on one core (a demo
run's share of a 2-core machine). Prints the build's seconds, the run's median seconds per train
step (train.parquet's `time_s` at each step's last role), and new / old ratios.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def copy_tree(rev: str | None, dest: Path) -> None:
    """`rev`'s files (or, for None, this working tree's tracked and untracked files) into `dest`."""
    dest.mkdir(parents=True)
    if rev is not None:
        data = subprocess.run(["git", "archive", rev], cwd=ROOT, check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(dest, filter="data")
        return
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def snakemake(tree: Path, target: str, cores: int) -> float:
    """Seconds `snakemake --cores N TARGET` takes in `tree` (fails loudly, naming the tree)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    t0 = time.perf_counter()
    proc = subprocess.run(["snakemake", "--cores", str(cores), target], cwd=tree, env=env,
                          capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"snakemake {target} failed in {tree}:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def measure(tree: Path, run: str) -> dict[str, float]:
    """Build seconds and median train-step seconds of `run` in `tree`."""
    import pandas as pd

    build_s = snakemake(tree, "results/models/tiny/model.json", 2)
    snakemake(tree, f"results/runs/{run}/train.parquet", 1)
    train = pd.read_parquet(tree / "results" / "runs" / run / "train.parquet")
    step_s = train.groupby("step")["time_s"].max()
    return {"build_s": build_s, "step_s": float(step_s.median()), "steps": len(step_s)}


def main(argv: list[str]) -> int:
    """Measure both trees, one after the other, and print the ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", default="8951ccf", help="the older commit")
    ap.add_argument("--run", default="voting-math-tiny-shared-s0", help="the demo run whose train steps are timed")
    ap.add_argument("--keep", type=Path, help="keep the two trees under this directory")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="bench_demo_cost-")) if args.keep is None else args.keep
    results = {}
    for name, rev in ((args.rev, args.rev), ("this tree", None)):
        tree = root / ("old" if rev else "new")
        copy_tree(rev, tree)
        results[name] = measure(tree, args.run)
        print(f"{name:>10}: base model {results[name]['build_s']:.0f} s, {args.run} "
              f"{results[name]['step_s']:.2f} s per train step (median of {results[name]['steps']})", flush=True)
    old, new = results[args.rev], results["this tree"]
    print(f"old / new: base model {old['build_s'] / new['build_s']:.2f}x, train step {old['step_s'] / new['step_s']:.2f}x, "
          f"base model + one step {(old['build_s'] + old['step_s']) / (new['build_s'] + new['step_s']):.2f}x")
    if args.keep is None:
        shutil.rmtree(root)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
