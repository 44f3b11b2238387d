"""Curves of a sweep while it runs: finished runs' eval curves and, when asked, running runs' partial ones.

A finished run (done.json) is read from its published eval.parquet; a running run from the partial
work/eval.parquet that the trainer refreshes atomically at each eval, with its step from
work/progress.json. Running runs are drawn dashed and labelled `running @ step N`.

    python -m analysis progress --out results/figures/progress.png [--include-running] -- RUN_DIR...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from trainer.contract import rundir

COLUMNS = ["run", "split", "step", "accuracy", "state", "at_step"]


def run_curve(run_dir: Path, include_running: bool) -> pd.DataFrame:
    """One run's first-split eval curve with its state (done / running), or an empty frame."""
    done = run_dir / rundir.DONE_JSON
    work = run_dir / rundir.WORK_DIR
    if done.exists():
        path, state, at = run_dir / rundir.EVAL_PARQUET, "done", json.loads(done.read_text())["steps_done"]
    elif include_running and (work / rundir.EVAL_PARQUET).exists():
        progress = work / rundir.PROGRESS_JSON
        at = json.loads(progress.read_text())["step"] if progress.exists() else None
        path, state = work / rundir.EVAL_PARQUET, "running"
    else:
        return pd.DataFrame(columns=COLUMNS)
    try:
        evals = pd.read_parquet(path, columns=["step", "split", "accuracy"])
    except Exception as e:  # a foreign or truncated file: say which, keep the cause
        raise ValueError(f"{run_dir.name}: cannot read {path}: {e}") from e
    if not len(evals):
        return pd.DataFrame(columns=COLUMNS)
    first = evals[evals["split"] == evals["split"].iloc[0]].sort_values("step", kind="stable")
    return first.assign(run=run_dir.name, state=state, at_step=at)[COLUMNS]


def progress_curves(run_dirs: list[str | Path], include_running: bool) -> pd.DataFrame:
    """Every run's curve (see run_curve), stacked; a run whose eval log cannot be read is left out and named
    on stderr (as `analyse` leaves out a corrupt run), so one bad file does not stop the figures."""
    parts = []
    for d in run_dirs:
        try:
            parts.append(run_curve(Path(d), include_running))
        except ValueError as e:
            print(f"left out of the progress figure: {e}", file=sys.stderr)
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)


def render_progress(curves: pd.DataFrame, out: str | Path) -> None:
    """One line per run: finished solid, running dashed and labelled with its step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for run, g in curves.groupby("run", sort=False):
        running = g["state"].iloc[0] == "running"
        label = f"{run} (running @ step {g['at_step'].iloc[0]})" if running else run
        ax.plot(g["step"], g["accuracy"], ls="--" if running else "-", marker="o", ms=3, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("eval accuracy (first split)")
    ax.set_title("sweep progress" if len(curves) else "sweep progress: no run has evaluated yet")
    if len(curves):
        ax.legend(fontsize=6, loc="best")
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
