"""The `calibrate-warnings` subcommand's arguments (analysis/calibrate_warnings.py does the work)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from analysis.calibrate import parse_selector
from analysis.calibrate_warnings import Goal, run
from analysis.settings import AnalysisSettings


def seed_list(text: str) -> list[int]:
    """0,1,2 -> [0, 1, 2]."""
    try:
        return sorted({int(s) for s in text.split(",") if s.strip()})
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--calibrate-seeds {text!r}: expected seeds like 0,1,2") from e


def add_calibrate_parser(sub: Any) -> None:
    """The subcommand and its options on the analysis command line."""
    p = sub.add_parser(
        "calibrate-warnings",
        help="choose each early-warning detector's threshold on some runs, judge it on the others",
    )
    p.add_argument("run_dirs", nargs="+", help="finished run directories (the calibration and the held-out runs)")
    p.add_argument("--out", required=True, help="directory of the table, figure and config block")
    p.add_argument("--calibrate-seeds", type=seed_list, default=None, help="seeds of the calibration runs, e.g. 0,1,2")
    p.add_argument(
        "--calibrate-on",
        action="append",
        default=[],
        type=parse_selector,
        metavar="AXIS=VALUE",
        help="calibrate on the runs with this axis value (repeatable; with --calibrate-seeds: both must hold)",
    )
    p.add_argument("--analysis", type=json.loads, default={}, help="config.yaml's `analysis` section as JSON")
    p.add_argument("--early-warning", type=json.loads, default={}, help="config.yaml's training.early_warning as JSON")
    p.add_argument("--goal-recall", type=float, default=Goal.recall, help="share of held-out cliffs to warn")
    p.add_argument("--max-false-alarm", type=float, default=Goal.false_alarm, help="bound on healthy runs warned")
    p.add_argument("--min-lead-evals", type=float, default=Goal.min_lead_evals, help="evals ahead of the cliff")


def calibrate_command(args: argparse.Namespace) -> dict[str, Any]:
    """Run the calibration from parsed arguments; returns its summary (calibration.json)."""
    return run(
        args.run_dirs,
        args.out,
        seeds=args.calibrate_seeds,
        selectors=args.calibrate_on,
        analysis=AnalysisSettings.from_dict(args.analysis),
        early_warning=args.early_warning,
        goal=Goal(recall=args.goal_recall, min_lead_evals=args.min_lead_evals, false_alarm=args.max_false_alarm),
    )
