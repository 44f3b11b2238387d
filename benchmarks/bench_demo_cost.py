"""What the demo costs, an older commit against this tree, side by side on this machine: the tiny
base model's warm start, and a train step of a demo run on each tree's own base model.

Usage: python benchmarks/bench_demo_cost.py [--rev 8951ccf] [--run voting-code-tiny-shared-s0]
                                            [--steps 4] [--old-model M.json] [--new-model M.json]

Each tree (REV from `git archive`, this one in place) builds config.yaml's tiny base model with
`python -m trainer base-model` on 2 threads (the base_model rule's), unless --old-model or
--new-model names a model.json that tree already built (its build_time_s is then the cost: pass
one only if it was built on this machine). Then each tree runs --steps train steps of --run with
the run config its own Snakefile gives (`snakemake -n -p`), no eval, on its own base model; a
step's cost is the mean over those steps of train.parquet's time_s (its last policy's), the first
step left out (warm-up). Prints both, the ratios, and the demo's cost model: one build plus one
step. Exits 1 when the warm start or the step is not --min-ratio times cheaper in this tree.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shlex
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
import json
try:
    from trainer.sweep.config import base_model_spec, load_yaml
except ImportError:
    from trainer.config import base_model_spec, load_yaml
print(json.dumps(base_model_spec(load_yaml("config.yaml"), "tiny", ["math", "code"])))
"""


def tree_env(tree: Path, threads: int) -> dict[str, str]:
    """The environment a child in `tree` runs with: the demo's CPU settings on `threads` threads."""
    return {**os.environ, **ENV, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(tree)}


def build(tree: Path, out: Path) -> dict:
    """Build `tree`'s tiny base model into `out` on 2 threads; its model.json."""
    env = tree_env(tree, 2)
    spec = subprocess.run(
        [sys.executable, "-c", SPEC], cwd=tree, env=env, check=True, capture_output=True, text=True
    ).stdout
    proc = subprocess.run(
        [sys.executable, "-m", "trainer", "base-model", "--spec", spec, "--out", str(out / "model.json")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        raise RuntimeError(f"the build in {tree} failed:\n{proc.stderr[-3000:]}")
    return json.loads((out / "model.json").read_text())


def run_config(tree: Path, run: str, steps: int) -> dict:
    """The run config `tree`'s Snakefile gives `run`, cut to `steps` steps without eval."""
    snakemake = Path(sys.executable).with_name("snakemake")
    proc = subprocess.run(
        [str(snakemake), "-n", "-p", "--directory", str(tree), f"results/runs/{run}/done.json"],
        cwd=tree,
        env=tree_env(tree, 1),
        capture_output=True,
        text=True,
    )
    lines = [ln for ln in proc.stdout.splitlines() if "trainer launch" in ln]
    if not lines:
        raise RuntimeError(
            f"no launch command for {run} in {tree}'s dry run:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    words = shlex.split(lines[0])
    cfg = json.loads(words[words.index("--run-config") + 1])
    cfg["training"].update({"max_steps": steps, "eval_every": steps + 1})
    return cfg


def step_seconds(tree: Path, cfg: dict, model_json: Path, run_dir: Path) -> float:
    """Mean seconds per train step (after the first) of `cfg` in `tree` on `model_json`."""
    import pandas as pd

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer",
            "launch",
            "--run-config",
            json.dumps(cfg),
            "--base-model",
            str(model_json),
            "--run-dir",
            str(run_dir),
        ],
        cwd=tree,
        env=tree_env(tree, 1),
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        raise RuntimeError(f"the run in {tree} failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    per_step = pd.read_parquet(run_dir / "train.parquet").groupby("step")["time_s"].max()
    return float(per_step.iloc[1:].mean())


def main(argv: list[str]) -> int:
    """Time both trees and print the ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", default="8951ccf", help="the older commit")
    ap.add_argument("--run", default="voting-code-tiny-shared-s0", help="the demo run whose steps are timed")
    ap.add_argument("--steps", type=int, default=4, help="train steps of the run in each tree")
    ap.add_argument("--old-model", type=Path, help="a model.json REV built on this machine (skips its build)")
    ap.add_argument("--new-model", type=Path, help="a model.json this tree built on this machine")
    ap.add_argument("--min-ratio", type=float, default=2.0, help="exit 1 when old / new cost is below this")
    args = ap.parse_args(argv)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        old_tree = Path(tmp) / "old"
        old_tree.mkdir()
        data = subprocess.run(["git", "archive", args.rev], cwd=ROOT, check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(old_tree, filter="data")
        for name, tree, given in ((args.rev, old_tree, args.old_model), ("this tree", ROOT, args.new_model)):
            work = Path(tmp) / name.replace(" ", "_")
            model_json = given or work / "model" / "model.json"
            info = json.loads(model_json.read_text()) if given else build(tree, model_json.parent)
            step = step_seconds(tree, run_config(tree, args.run, args.steps), model_json, work / "run")
            rows[name] = {"build_s": info["build_time_s"], "step_s": step}
            print(
                f"{name}: warm start {info['warm_start']['steps']} steps in {info['build_time_s']:.0f} s "
                f"(final loss {info['warm_start']['final_loss']:.3f}); a {args.run} step {step:.2f} s",
                flush=True,
            )
    old, new = rows[args.rev], rows["this tree"]
    ratio = (old["build_s"] + old["step_s"]) / (new["build_s"] + new["step_s"])
    print(
        f"old / new: warm start {old['build_s'] / new['build_s']:.2f}x, "
        f"demo step {old['step_s'] / new['step_s']:.2f}x, warm start + one step {ratio:.2f}x "
        f"(target {args.min_ratio}x each)"
    )
    return 0 if min(old["build_s"] / new["build_s"], old["step_s"] / new["step_s"]) >= args.min_ratio else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
