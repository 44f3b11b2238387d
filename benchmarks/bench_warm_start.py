"""The demo's tiny base model over warm-start seeds x micro-batch splits: final loss, base accuracy
per task (greedy and at the eval temperature) and build time.

Usage: python benchmarks/bench_warm_start.py [--seeds 0 1 2 3] [--splits 2 4] [--jobs 2]
                                             [--target-loss 0.1] [--min-accuracy 0.25] [--out DIR]

Each build is `python -m trainer base-model` on config.yaml's tiny scale with `seed` and
`warm_start_micro_batches` overridden; the split changes the float summation order of every
gradient, as another CPU's kernels do, so a schedule that converges on every (seed, split) is
one that does not depend on the machine. Base accuracy is the single workflow's eval at step 0
of a demo run (its eval problems, at temperature 0 and at training.eval_temperature). `--jobs`
builds run side by side, the machine's cores shared among them. Exits 1 when a final loss is
above the target or an accuracy below the minimum.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TASKS = ("math", "code")
# the demo's CPU settings (config.yaml scales.tiny.env) and one tokenizer thread
ENV = {
    "GLIBC_TUNABLES": "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736",
    "TOKENIZERS_PARALLELISM": "false",
}


def build(out: Path, seed: int, split: int, threads: int, extra: dict[str, Any]) -> dict[str, Any]:
    """Build one base model into `out` and return its model.json."""
    from trainer.sweep.config import base_model_spec, load_yaml

    spec = base_model_spec(load_yaml(ROOT / "config.yaml"), "tiny", list(TASKS))
    spec["tiny"].update({"seed": seed, "warm_start_micro_batches": split, **extra})
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **ENV, "OMP_NUM_THREADS": str(threads)}
    with open(out / "build.log", "w") as log:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "trainer",
                "base-model",
                "--spec",
                json.dumps(spec),
                "--out",
                str(out / "model.json"),
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=log,
        )
    if proc.returncode:
        raise RuntimeError(f"building seed {seed} split {split} failed: see {out / 'build.log'}")
    return json.loads((out / "model.json").read_text())


def base_accuracy(model_json: Path, threads: int) -> dict[str, float]:
    """The single workflow's eval accuracy at step 0 of a demo run, per task, greedy and sampled."""
    env = {**os.environ, **ENV, "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.run(
        [sys.executable, __file__, "--evaluate", str(model_json), "--threads", str(threads)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        raise RuntimeError(f"evaluating {model_json} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def evaluate(model_json: Path, threads: int) -> dict[str, float]:
    """(In a child process.) Accuracy of the base model on each task's first eval split, at
    temperature 0 and at the demo's eval temperature."""
    from trainer.contract.runid import parse_run_id
    from trainer.rl.train import Trainer
    from trainer.sweep.config import load_yaml, resolve_run_config
    from trainer.sweep.launch import write_run_config

    base = json.loads(model_json.read_text())
    config = load_yaml(ROOT / "config.yaml")
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for task in TASKS:
            rc = resolve_run_config(config, parse_run_id(f"single-{task}-tiny-shared-s0"))
            sampled_t = rc["training"]["eval_temperature"]
            for name, temperature in (("greedy", 0.0), ("sampled", sampled_t)):
                rc["training"].update({"eval_temperature": temperature, "eval_samples": 1})
                rc["resources"]["cpus"] = threads
                run_dir = Path(tmp) / f"{task}-{name}"
                trainer = Trainer(write_run_config(rc, base, run_dir), run_dir, log=lambda msg: None)
                trainer.evaluate(0)
                out[f"{task}_{name}"] = trainer.eval_rows[0]["accuracy"]
    return out


def one(args: argparse.Namespace, seed: int, split: int, threads: int) -> dict[str, Any]:
    """Build and evaluate one (seed, split)."""
    out = Path(args.out) / f"s{seed}-m{split}"
    t0 = time.perf_counter()
    info = build(out, seed, split, threads, json.loads(args.tiny))
    row = {
        "seed": seed,
        "split": split,
        "steps": info["warm_start"]["steps"],
        "final_loss": info["warm_start"]["final_loss"],
        "build_s": time.perf_counter() - t0,
        "threads": threads,
    }
    row.update(base_accuracy(out / "model.json", threads))
    print(json.dumps(row), flush=True)
    return row


def main(argv: list[str]) -> int:
    """Build every (seed, split), print the table, check the targets."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument(
        "--splits", type=int, nargs="+", default=[4, 8], help="warm_start_micro_batches values (4: the demo's)"
    )
    ap.add_argument("--jobs", type=int, default=2, help="builds side by side (the cores are shared among them)")
    ap.add_argument("--target-loss", type=float, default=0.1, help="every final loss must be below this")
    ap.add_argument("--min-accuracy", type=float, default=0.25, help="every base accuracy must be at least this")
    ap.add_argument("--tiny", default="{}", help="JSON overrides of scales.tiny.tiny (e.g. a schedule to try)")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench_warm_start"))
    ap.add_argument("--evaluate", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.evaluate:
        print(json.dumps(evaluate(args.evaluate, args.threads)))
        return 0
    import pandas as pd

    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    cells = [(seed, split) for seed in args.seeds for split in args.splits]
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda c: one(args, *c, threads), cells))
    table = pd.DataFrame(rows).sort_values(["seed", "split"])
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    accuracies = table[[f"{t}_{k}" for t in TASKS for k in ("greedy", "sampled")]]
    failed = table[(table["final_loss"] >= args.target_loss) | (accuracies < args.min_accuracy).any(axis=1)]
    print(
        f"final loss {table['final_loss'].min():.3f}-{table['final_loss'].max():.3f} (target < {args.target_loss}); "
        f"base accuracy {accuracies.min().min():.3f}-{accuracies.max().max():.3f} (at least {args.min_accuracy}); "
        f"build {table['build_s'].min():.0f}-{table['build_s'].max():.0f} s on {threads} thread(s) each"
    )
    if len(failed):
        print(f"FAIL: {len(failed)} of {len(table)} builds miss the targets:\n{failed.to_string(index=False)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
