"""The early-warning detectors judged on planted synthetic runs (tests/synthetic_logs.py).

    python -m benchmarks.bench_warnings [--out DIR] [--steps 300] [--seeds 3]

Writes planted runs (cliffs, Shared capture, Isolated amplification planted), computes each run's
warnings.parquet from its train.parquet with the trainer's detectors (trainer/early_warning.py), the
cliff step with analysis/curves.py, and prints analysis/warnings_judged.py's table: per detector, how
often it fired before the cliff, the median lead time and the false-alarm rate on runs without a cliff.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from tests.planted_warnings import judged_planted_runs


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
