"""Command line of the analysis: what the Snakemake rules call.

python -m analysis analyse --results results --analysis JSON --expected RUN... -- RUN_DIR...
python -m analysis figures --results results --out-dir results/figures --expected RUN...
python -m analysis progress --out results/figures/progress.png [--include-running] -- RUN_DIR...
python -m analysis calibrate-warnings --calibrate-seeds 0,1,2 [--calibrate-on AXIS=VALUE] --out DIR -- RUN_DIR...
"""

from __future__ import annotations

import argparse
import json
import sys

import pandas as pd

from analysis.analyse import analyse
from analysis.calibrate_cli import add_calibrate_parser, calibrate_command
from analysis.figures import render_all
from analysis.names import run_axes
from analysis.progress import progress_curves, render_progress
from analysis.settings import AnalysisSettings
from trainer.contract.rundir import parse_run_id


def expected_axes(runs: list[str]) -> pd.DataFrame:
    """The matrix's axes from its run ids."""
    return pd.DataFrame([{"run": r, **run_axes(parse_run_id(r).axes())} for r in runs])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m analysis", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("analyse", help="every finished run in one pass: summary and question tables")
    p.add_argument("--results", required=True, help="the results directory to write into")
    p.add_argument("--analysis", type=json.loads, default={}, help="config.yaml's `analysis` section as JSON")
    p.add_argument("--expected", nargs="*", default=[], help="every run id of the matrix")
    p.add_argument("run_dirs", nargs="*", help="finished run directories")
    p = sub.add_parser("figures", help="render every figure from `analyse`'s tables")
    p.add_argument("--results", required=True, help="the results directory `analyse` wrote")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--analysis", type=json.loads, default={}, help="config.yaml's `analysis` section as JSON")
    p.add_argument("--expected", nargs="*", default=[])
    p = sub.add_parser("progress", help="eval curves of finished runs and (--include-running) running ones")
    p.add_argument("--out", required=True, help="the figure file (png or pdf)")
    p.add_argument("--include-running", action="store_true", help="draw running runs from their work/ logs")
    p.add_argument("run_dirs", nargs="*", help="run directories (finished or not)")
    add_calibrate_parser(sub)
    args = parser.parse_args(argv)

    if args.command == "analyse":
        analyse(args.run_dirs, args.expected, AnalysisSettings.from_dict(args.analysis), args.results)
    elif args.command == "figures":
        expected = expected_axes(args.expected) if args.expected else None
        render_all(
            args.results, args.out_dir, expected, capture_share=AnalysisSettings.from_dict(args.analysis).capture_share
        )
    elif args.command == "progress":
        curves = progress_curves(args.run_dirs, args.include_running)
        render_progress(curves, args.out)
        running = curves[curves["state"] == "running"].drop_duplicates("run")
        print(
            f"{curves['run'].nunique()} runs drawn into {args.out}"
            + "".join(f"; {r.run} running @ step {r.at_step}" for r in running.itertuples()),
            file=sys.stderr,
        )
    elif args.command == "calibrate-warnings":
        summary = calibrate_command(args)
        print(summary["verdict"], file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
