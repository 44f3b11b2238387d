"""The job DAG: the paper matrix under `--profile slurm`, and `snakemake figures` never training."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.workflow import snakemake, train_runs


def test_paper_matrix_is_126_train_jobs(slurm_profile_installed):
    out = snakemake("-n", "--profile", "slurm").stdout
    runs = train_runs(out)
    assert len(runs) == 126 and set(runs.values()) == {1}
    assert sum(r.startswith("single-") for r in runs) == 18
    assert "voting-math-qwen3-0.6b-shared-s0" in runs and "orch_workers-code-qwen3-4b-isolated-s2" in runs


def test_five_seeds_on_the_command_line_is_210(slurm_profile_installed):
    out = snakemake("-n", "--profile", "slurm", "--config", "seeds=[0,1,2,3,4]").stdout
    runs = train_runs(out)
    assert len(runs) == 210 and set(runs.values()) == {1}
    assert "eval_opt-code-qwen3-1.7b-isolated-s4" in runs


def test_default_target_is_the_demo():
    runs = train_runs(snakemake("-n").stdout)
    assert len(runs) == 14 and all("-tiny-" in r for r in runs)


def test_demo_train_jobs_start_longest_first():
    """Priorities from the runs' model calls: the eval_opt x math runs first, the baselines last."""
    out = snakemake("-n").stdout
    priority = {run: int(p) for run, p in re.findall(r"wildcards: run=(\S+)\n\s+priority: (\d+)", out)}
    assert len(priority) == 14
    order = sorted(priority, key=priority.get, reverse=True)
    assert {r.split("-")[0] + "-" + r.split("-")[1] for r in order[:2]} == {"eval_opt-math"}
    assert set(order[-2:]) == {"single-math-tiny-shared-s0", "single-code-tiny-shared-s0"}


@pytest.mark.parametrize(
    "override, message",
    [
        ("training={learning_rat: 1}", "training.learning_rat: unknown key"),
        ("matrices={demo: {workflows: [debate]}}", "matrices.demo.workflows: 'debate' has no entry in `workflows`"),
        ("workflows={my-flow: {}}", "workflows: 'my-flow' does not match"),  # no dash: run ids split on it
        ("matrix=nope", "matrix: 'nope' is not one of matrices"),
    ],
)
def test_bad_config_fails_before_any_job_naming_the_key(override, message):
    proc = snakemake("-n", "--config", override, check=False)
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr
    assert "rule train" not in proc.stdout


def test_figures_reanalyses_only_finished_runs(workdir):
    """One finished run, the rest missing: `snakemake figures` schedules no training and renders."""
    from tests.synthetic_logs import write_synthetic_run

    write_synthetic_run(workdir / "results" / "runs" / "voting-math-tiny-shared-s0", "voting-math-tiny-shared-s0")
    dry = snakemake("figures", "-n", "-p", cwd=workdir).stdout
    assert "rule train" not in dry and "rule base_model" not in dry
    assert "rule figures:" in dry and "-- results/runs/voting-math-tiny-shared-s0 >" in dry
    snakemake("figures", "--cores", "1", cwd=workdir)
    for ext in ("png", "pdf"):
        assert (workdir / "results" / "figures" / f"accuracy_curves.{ext}").stat().st_size > 1000
    collect_log = (workdir / "results" / "logs" / "analyse.log").read_text()
    assert "13 runs not finished" in collect_log and "eval_opt-math-tiny-shared-s0" in collect_log
    assert (workdir / "results" / "logs" / "plot_figures.log").exists()
    assert not (workdir / "results" / "runs" / "voting-code-tiny-shared-s0").exists()
    assert "Nothing to be done" in snakemake("figures", "-n", cwd=workdir).stdout
    done = workdir / "results" / "runs" / "voting-math-tiny-shared-s0" / "done.json"
    os.utime(done, ns=(done.stat().st_atime_ns, done.stat().st_mtime_ns + 10**9))  # the run finished again
    assert "rule figures:" in snakemake("figures", "-n", cwd=workdir).stdout
    write_synthetic_run(workdir / "results" / "runs" / "single-math-tiny-shared-s0", "single-math-tiny-shared-s0")
    again = snakemake("figures", "-n", "-p", cwd=workdir).stdout  # one more finished run: analysed again
    assert "rule figures:" in again and "results/runs/single-math-tiny-shared-s0" in again
    default = snakemake("-n", cwd=workdir).stdout  # the default target takes the files from its own rules
    assert "rule analyse:" in default and "rule plot_figures:" in default and "rule figures:" not in default


# `figures` as named through Snakemake's Python entry point, where sys.argv is not Snakemake's command line
# (the re-analysis mode once sniffed sys.argv for the target and then scheduled every train job here)
FIGURES_FROM_PYTHON = "import sys; from snakemake.cli import main; main(sys.argv[1:] + ['figures', '-n', '-p'])"


@pytest.mark.parametrize("how", ["as typed", "config changed", "slurm profile", "python entry point"])
def test_figures_never_schedules_training(how, workdir, slurm_profile_installed):
    """However it is named, `figures` is one local job over the finished runs: no train or base_model job."""
    from tests.synthetic_logs import write_synthetic_run

    write_synthetic_run(workdir / "results" / "runs" / "voting-math-tiny-shared-s0", "voting-math-tiny-shared-s0")
    if how == "python entry point":
        proc = subprocess.run(
            [sys.executable, "-c", FIGURES_FROM_PYTHON, "--directory", str(workdir)],
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        dry = proc.stdout
    else:
        extra = {
            "as typed": [],
            "config changed": ["--config", "training={learning_rate: 0.5}"],
            "slurm profile": ["--profile", "slurm"],
        }[how]
        dry = snakemake("figures", "-n", "-p", *extra, cwd=workdir).stdout
    assert "rule train" not in dry and "rule base_model" not in dry and "rule analyse" not in dry
    assert "rule figures:" in dry and "python -m analysis analyse" in dry
    finished = re.search(r" -- (.*?) > results/logs/analyse.log", dry).group(1).split()
    assert finished == ([] if how == "slurm profile" else ["results/runs/voting-math-tiny-shared-s0"])
