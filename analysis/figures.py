"""The study's figures, from parquet alone. One colour per policy, one marker per scale."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from trainer import schema  # noqa: E402

POLICY_COLOURS = {"shared": "#1f77b4", "isolated": "#d62728"}
SCALE_MARKERS = ["o", "s", "^", "D", "v", "P"]
WORKFLOW_ORDER = ["single", "eval_opt", "voting", "orch_workers"]
WORKFLOW_NAMES = {"single": "Single agent", "eval_opt": "Evaluator-Optimizer", "voting": "Voting",
                  "orch_workers": "Orchestrator-Workers"}


def load_curves(summary: pd.DataFrame, runs_dir: str | Path) -> pd.DataFrame:
    """The eval rows of every run in the summary, with the run's axes."""
    frames = []
    for run, g in summary.groupby("run"):
        evals = pd.read_parquet(Path(runs_dir) / run / schema.EVAL_PARQUET, columns=["step", "split", "accuracy"])
        meta = g.iloc[0]
        frames.append(evals.assign(run=run, **{a: meta[a] for a in ("workflow", "task", "scale", "policy", "seed")}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _save(fig: plt.Figure, out_dir: Path, name: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.{ext}" for ext in ("png", "pdf")]
    for p in paths:
        fig.savefig(p, dpi=150, bbox_inches="tight")
    plt.close(fig)
    return paths


def accuracy_curves(summary: pd.DataFrame, curves: pd.DataFrame, out_dir: Path,
                    workflows: list[str], tasks: list[str], scales: list[str]) -> list[Path]:
    """Rows = workflow, columns = task; a line per scale and policy (mean over seeds, min-max band),
    the base accuracy dashed; cells with no finished run are labelled missing."""
    fig, axes = plt.subplots(len(workflows), len(tasks), figsize=(4.2 * len(tasks), 2.8 * len(workflows)),
                             squeeze=False, sharex=True, sharey=True)
    markers = {s: SCALE_MARKERS[i % len(SCALE_MARKERS)] for i, s in enumerate(scales)}
    for r, wf in enumerate(workflows):
        for c, task in enumerate(tasks):
            ax = axes[r][c]
            cell = curves[(curves["workflow"] == wf) & (curves["task"] == task)] if len(curves) else curves
            if not len(cell):
                ax.text(0.5, 0.5, "missing", transform=ax.transAxes, ha="center", va="center", color="0.5")
                ax.set_title(f"{WORKFLOW_NAMES.get(wf, wf)} / {task}", fontsize=9)
            else:
                split = sorted(cell["split"].unique())[0]  # the task's first eval split
                cell = cell[cell["split"] == split]
                for (scale, policy), g in cell.groupby(["scale", "policy"]):
                    by_step = g.groupby("step")["accuracy"]
                    mean = by_step.mean()
                    colour = POLICY_COLOURS.get(policy, "0.3")
                    ax.plot(mean.index, mean.values, color=colour, marker=markers.get(scale, "o"), ms=3.5, lw=1.4,
                            label=f"{policy}, {scale}")
                    if g["seed"].nunique() > 1:
                        ax.fill_between(mean.index, by_step.min().values, by_step.max().values, color=colour,
                                        alpha=0.15, lw=0)
                    base = g[g["step"] == 0]["accuracy"].mean()
                    ax.axhline(base, color=colour, ls="--", lw=0.9, alpha=0.7)
                ax.set_title(f"{WORKFLOW_NAMES.get(wf, wf)} / {task} ({split})", fontsize=9)
                ax.legend(fontsize=7, loc="best")
            if r == len(workflows) - 1:
                ax.set_xlabel("training step")
            if c == 0:
                ax.set_ylabel("accuracy")
            ax.grid(alpha=0.3)
    fig.suptitle("Eval accuracy over training (dashed: base model)", fontsize=11)
    fig.tight_layout()
    return _save(fig, out_dir, "accuracy_curves")


def render_all(summary: pd.DataFrame, runs_dir: str | Path, out_dir: str | Path,
               expected: pd.DataFrame | None = None) -> list[Path]:
    """Every figure; `expected` (the matrix's axes) decides the grid, so missing cells show as gaps."""
    out_dir = Path(out_dir)
    grid = expected if expected is not None and len(expected) else summary
    present = set(grid["workflow"]) if len(grid) else set()
    workflows = [w for w in WORKFLOW_ORDER if w in present] or ["single"]
    tasks = sorted(set(grid["task"])) if len(grid) else ["math"]
    scales = sorted(set(grid["scale"])) if len(grid) else []
    curves = load_curves(summary, runs_dir) if len(summary) else pd.DataFrame()
    return accuracy_curves(summary, curves, out_dir, workflows, tasks, scales)
