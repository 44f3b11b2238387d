"""Curves of running runs (analysis/progress.py): a running run's partial work/ logs are drawn, marked as
running with its step, only when asked; `python -m analysis progress` renders the figure."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd

from analysis.progress import progress_curves
from tests.workflow import ROOT
from trainer.contract.rundir import write_json_atomic


def make_runs(tmp_path):
    """One finished run (published eval.parquet + done.json), one running (work/ logs + progress.json)."""
    done, running = tmp_path / "voting-math-tiny-shared-s0", tmp_path / "voting-math-tiny-isolated-s0"
    (done / "work").mkdir(parents=True)
    (running / "work").mkdir(parents=True)
    evals = pd.DataFrame({"step": [0, 5, 10], "split": "arithmetic", "accuracy": [0.2, 0.4, 0.5]})
    evals.to_parquet(done / "eval.parquet")
    write_json_atomic({"steps_done": 10}, done / "done.json")
    evals.iloc[:2].to_parquet(running / "work" / "eval.parquet")
    write_json_atomic({"step": 7, "phase": "training"}, running / "work" / "progress.json")
    return [done, running]


def test_running_runs_are_drawn_only_when_asked(tmp_path):
    dirs = make_runs(tmp_path)
    assert set(progress_curves(dirs, include_running=False)["run"]) == {"voting-math-tiny-shared-s0"}
    curves = progress_curves(dirs, include_running=True)
    running = curves[curves["run"] == "voting-math-tiny-isolated-s0"]
    assert list(running["step"]) == [0, 5] and set(running["state"]) == {"running"} and set(running["at_step"]) == {7}


def test_cli_renders_the_figure_and_names_running_runs(tmp_path):
    dirs = make_runs(tmp_path)
    for flag, named in (([], False), (["--include-running"], True)):
        out = tmp_path / f"progress{len(flag)}.png"
        proc = subprocess.run(
            [sys.executable, "-m", "analysis", "progress", "--out", str(out), *flag, "--", *map(str, dirs)],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr
        assert out.stat().st_size > 0
        assert ("voting-math-tiny-isolated-s0 running @ step 7" in proc.stderr) is named


def test_snakemake_figures_draws_running_runs_only_under_include_running(workdir):
    """The `figures` rule's progress figure: a running run (work/ logs, no done.json) is drawn and named
    under --config include_running=true, not without; the flag's change reruns the job."""
    import json

    from tests.synthetic_logs import planted_run
    from tests.workflow import snakemake

    runs_dir = workdir / "results" / "runs"
    finished, running = "voting-math-tiny-shared-s0", "voting-math-tiny-isolated-s0"
    for run in (finished, running):
        planted_run(runs_dir / run, run, steps=20, eval_every=5, samples_per_eval=2)
    work = runs_dir / running / "work"
    work.mkdir(exist_ok=True)
    (runs_dir / running / "eval.parquet").rename(work / "eval.parquet")
    for name in ("done.json", "train.parquet", "samples.parquet", "warnings.parquet"):
        (runs_dir / running / name).unlink(missing_ok=True)
    (work / "progress.json").write_text(json.dumps({"run": running, "step": 7, "phase": "training"}))

    log = workdir / "results" / "logs" / "plot_figures.log"
    snakemake("figures", "--cores", "1", "--config", "include_running=true", cwd=workdir)
    assert f"{running} running @ step 7" in log.read_text()
    assert (workdir / "results" / "figures" / "progress.png").stat().st_size > 5000
    assert "rule figures:" in snakemake("figures", "-n", cwd=workdir).stdout  # the flag's change reruns it
    snakemake("figures", "--cores", "1", cwd=workdir)
    assert "running @ step" not in log.read_text() and "1 runs drawn" in log.read_text()
