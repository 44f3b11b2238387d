"""The cost plan of a matrix: per run, per scale and workflow, and in total (`python -m trainer plan`).

Per run: model calls and generated tokens per step, predicted seconds per step, seconds and GPU-hours,
whether it fits its time limit, where its step time comes from (cost.rate_for), and, once the run
finished, what it took (the train job's Snakemake benchmark, else done.json's wall time; the mean step
time from train.parquet) and predicted over actual, and the eval splits whose size it assumes
(`eval_assumed`, cost.ASSUMED_EVAL_PROBLEMS). The gate (trainer/sweep/gate.py) beside them: one eval's
predicted seconds (`eval_one_s`), one eval's and one step's lower bounds at the device's peak
(`eval_bound_s`, `step_bound_s`), `time_min`, and the verdict at submission (`gate`: ok, warn or refuse,
`gate_reason`); the GiB a process holds at its update (`memory_gib`: weights, optimizer state, one
micro-batch, trainer/models/memory.py); disk (trainer/sweep/disk.py): one checkpoint, the checkpoints' peak and the logs, in GB.
Written to results/plan.csv.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from trainer.contract import rundir
from trainer.sweep.config import expand_matrix, resolve_run_config
from trainer.sweep.cost import ASSUMED_EVAL_PROBLEMS, assumed_splits, wall_time_s
from trainer.sweep.disk import run_disk
from trainer.sweep.gate import assess
from trainer.sweep.measured import cpu_name, load_rates

COLUMNS = [
    "run",
    "scale",
    "workflow",
    "task",
    "policy",
    "seed",
    "variant",
    "device",
    "gpus",
    "cpus",
    "calls_per_step",
    "tokens_per_step",
    "step_s",
    "eval_s",
    "run_s",
    "gpu_hours",
    "time_limit_s",
    "fits",
    "eval_one_s",
    "eval_bound_s",
    "step_bound_s",
    "time_min",
    "gate",
    "gate_reason",
    "memory_gib",
    "checkpoint_gb",
    "disk_peak_gb",
    "log_gb",
    "source",
    "actual_s",
    "actual_step_s",
    "predicted_over_actual",
    "eval_assumed",
]


def run_device(run_config: dict[str, Any], gpu: str) -> str:
    """Where a run's steps are timed: the named GPU for a GPU run, this machine's CPU for a CPU run."""
    return gpu if run_config["resources"].get("gpus", 0) else cpu_name()


def actual_times(run_dir: Path, results: Path, run: str) -> tuple[float, float]:
    """What a finished run took (s) and its mean step time from train.parquet; NaN while it is not done."""
    path = run_dir / rundir.DONE_JSON
    done = json.loads(path.read_text()) if path.exists() else None
    if not done:
        return float("nan"), float("nan")
    bench = results / "benchmarks" / "train" / f"{run}.tsv"  # the whole job: start-up included
    total = float(pd.read_csv(bench, sep="\t")["s"].iloc[0]) if bench.exists() else float(done["wall_time_s"])
    train = pd.read_parquet(run_dir / rundir.TRAIN_PARQUET, columns=["step", "time_s"])
    return total, float(train.groupby("step")["time_s"].max().mean())


def plan_rows(
    config: dict[str, Any],
    results: str | Path,
    matrix: str | None = None,
    gpu: str = "H100",
    rates: list[dict[str, Any]] | None = None,
) -> pd.DataFrame:
    """One row per run of the matrix (see COLUMNS); runs with nothing to plan from have NaN figures and
    say why in `source`."""
    results = Path(results)
    rates = load_rates() if rates is None else rates
    rows = []
    for run in expand_matrix(config, matrix):
        cfg = resolve_run_config(config, run)
        device = run_device(cfg, gpu)
        scale = config["scales"][run.scale]
        predicted = {**assess(str(run), cfg, scale, rates, device), **run_disk(cfg, scale)}
        actual_s, actual_step_s = actual_times(results / "runs" / str(run), results, str(run))
        rows.append(
            {
                "run": str(run),
                "scale": run.scale,
                "workflow": run.workflow,
                "task": run.task,
                "policy": run.policy,
                "seed": run.seed,
                "variant": run.variant or "",
                "device": device,
                "gpus": cfg["resources"].get("gpus", 0),
                "cpus": cfg["resources"].get("cpus", 1),
                **predicted,
                "actual_s": actual_s,
                "actual_step_s": actual_step_s,
                "eval_assumed": ", ".join(assumed_splits(cfg)),
            }
        )  # splits of ASSUMED_EVAL_PROBLEMS
    df = pd.DataFrame(rows).reindex(columns=COLUMNS)
    df["predicted_over_actual"] = df["run_s"] / df["actual_s"]
    return df


def default_parallel(df: pd.DataFrame, backend: str) -> int:
    """Runs at once: every run on a cluster (the profile submits them all), else this machine's cores over
    a run's."""
    if backend == "slurm":
        return max(1, len(df))
    return max(1, (os.cpu_count() or 1) // max(1, int(df["cpus"].max())))


def summary(df: pd.DataFrame, parallel: int) -> str:
    """The plan as a person reads it: per scale, per workflow (per variant where any), in total; the runs that do
    not fit."""
    lines = []
    named = df.assign(variant=df["variant"].replace("", "(none)"))
    for by in ("scale", "workflow") + (("variant",) if (df["variant"] != "").any() else ()):
        g = named.groupby(by, sort=False).agg(
            runs=("run", "size"),
            hours=("run_s", lambda s: s.sum(min_count=1) / 3600),
            gpu_hours=("gpu_hours", lambda s: s.sum(min_count=1)),
            step_s=("step_s", "mean"),
            eval_one_h=("eval_one_s", lambda s: s.mean() / 3600),
            disk_peak_gb=("disk_peak_gb", lambda s: s.sum(min_count=1)),
            not_fitting=("fits", lambda s: int((s == False).sum())),  # noqa: E712 (a Series, element-wise)
        )
        lines += [f"per {by}:", g.to_string(float_format=lambda v: f"{v:.2f}"), ""]
    for scale, g in df.groupby("scale", sort=False):
        sources = sorted(set(g["source"]))
        lines.append(f"{scale}: step time " + "; ".join(sources))
    total_h = df["run_s"].sum() / 3600
    lines += [
        "",
        f"total: {len(df)} runs, {total_h:.2f} run-hours, {df['gpu_hours'].sum():.1f} GPU-hours, "
        f"wall time {wall_time_s(df['run_s'].dropna().tolist(), parallel) / 3600:.2f} h "
        f"running {parallel} at a time",
    ]
    late = df[df["fits"] == False]  # noqa: E712 (NaN rows are neither)
    if len(late):
        lines.append(f"{len(late)} runs would NOT fit their time limit (time_min x (1 + max_num_timeout)):")
        lines += [
            f"  {r.run}: {r.run_s / 3600:.1f} h predicted, limit {r.time_limit_s / 3600:.1f} h"
            for r in late.itertuples()
        ]
    lines += gate_lines(df) + disk_lines(df)
    assumed = sorted({f"{r.task}: {r.eval_assumed}" for r in df.itertuples() if r.eval_assumed})
    if assumed:
        lines.append(
            f"eval splits read whole (eval_problems: all) whose size is unknown are ASSUMED to hold "
            f"{ASSUMED_EVAL_PROBLEMS} problems: " + "; ".join(assumed)
        )
    unknown = df[df["run_s"].isna()]
    if len(unknown):
        lines.append(f"{len(unknown)} runs cannot be planned: " + "; ".join(sorted(set(unknown["source"]))))
    done = df.dropna(subset=["actual_s"])
    if len(done):
        lines.append(
            f"finished runs: predicted over actual {done['run_s'].sum() / done['actual_s'].sum():.2f} in "
            f"total (per run {done['predicted_over_actual'].min():.2f}-"
            f"{done['predicted_over_actual'].max():.2f}, {len(done)} runs)"
        )
    return "\n".join(lines)


def gate_lines(df: pd.DataFrame) -> list[str]:
    """The gate's verdicts (trainer/sweep/gate.py): the runs refused at submission, then those warned about."""
    lines = []
    for gate, what in (("refuse", "REFUSED at submission"), ("warn", "warned about at submission")):
        hit = df[df["gate"] == gate]
        if len(hit):
            lines.append(f"{len(hit)} runs {what}:")
            lines += [f"  {r.gate_reason}" for r in hit.itertuples()]
    return lines


def disk_lines(df: pd.DataFrame) -> list[str]:
    """Disk per run (the largest) and in total: one checkpoint, the checkpoints' peak, the logs."""
    if df["checkpoint_gb"].isna().all():
        return []
    return [
        f"disk (trainer/sweep/disk.py): one checkpoint up to {df['checkpoint_gb'].max():.2f} GB, a run's "
        f"checkpoints at most {df['disk_peak_gb'].max():.2f} GB and its logs {df['log_gb'].max():.2f} GB; "
        f"in total {df['disk_peak_gb'].sum():.1f} GB of checkpoints and {df['log_gb'].sum():.1f} GB of logs "
        f"under results/ (`python -m trainer clean` removes superseded state)"
    ]


def write_plan(df: pd.DataFrame, out: str | Path) -> Path:
    """results/plan.csv, replaced atomically."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".csv.tmp")
    df.to_csv(tmp, index=False)
    tmp.replace(out)
    return out


def write_html(df: pd.DataFrame, text: str, out: str | Path) -> None:
    """The plan for the HTML report: the summary, then one row per run."""
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(f"<pre>{text}</pre>\n" + df.to_html(index=False, float_format=lambda v: f"{v:.3g}"))


def as_json(df: pd.DataFrame) -> str:
    """The rows as JSON (NaN as null)."""
    return json.dumps(json.loads(df.to_json(orient="records")), indent=1)
