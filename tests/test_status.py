"""`python -m trainer status` and `snakemake status`: every run of the matrix and where it stands;
the Snakemake restart switch."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.workflow import ROOT, snakemake
from trainer.contract.rundir import write_json_atomic
from trainer.sweep import status as status_module
from trainer.sweep.config import load_yaml


def make_run(
    results,
    run,
    *,
    max_steps=30,
    config_hash="h1",
    done_hash=None,
    done=None,
    job=None,
    progress=None,
    failure=None,
    log=None,
):
    """A run directory with the given files (what the launcher and the trainer would have written)."""
    run_dir = results / "runs" / run
    (run_dir / "work" / "submitit").mkdir(parents=True)
    write_json_atomic(
        {"run": run, "config_hash": config_hash, "training": {"max_steps": max_steps}}, run_dir / "config.json"
    )
    if done:
        write_json_atomic(
            {
                "config_hash": done_hash or config_hash,
                "steps_done": done,
                "steps_expected": max_steps,
                "wall_time_s": 12.0,
            },
            run_dir / "done.json",
        )
    if job:
        write_json_atomic({"folder": str(run_dir / "work" / "submitit"), **job}, run_dir / "work" / "job.json")
    if progress is not None:
        write_json_atomic(
            {"step": progress, "max_steps": max_steps, "phase": "training"}, run_dir / "work" / "progress.json"
        )
    if failure:
        write_json_atomic({"error": failure}, run_dir / "work" / "failure.json")
    if log:
        (run_dir / "work" / "submitit" / f"{job['job_id']}_0_log.err").write_text(log)
    return run_dir


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_every_state_from_run_files_and_squeue(tmp_path, monkeypatch):
    config = load_yaml(ROOT / "config.yaml")  # the demo matrix: 14 runs
    results = tmp_path / "results"
    make_run(results, "voting-math-tiny-shared-s0", done=30)
    make_run(results, "voting-math-tiny-isolated-s0", job={"backend": "slurm", "job_id": "101"})
    make_run(results, "voting-code-tiny-shared-s0", job={"backend": "slurm", "job_id": "102"}, progress=7)
    make_run(
        results,
        "voting-code-tiny-isolated-s0",
        job={"backend": "slurm", "job_id": "103"},
        progress=9,
        failure="TrainingError: run voting-code-tiny-isolated-s0: 11 steps skipped",
    )
    make_run(
        results,
        "eval_opt-math-tiny-shared-s0",
        job={"backend": "slurm", "job_id": "104"},
        progress=4,
        log="step 4/30 ...\ntorch.OutOfMemoryError: CUDA out of memory\nsrun: error: node01: task 0: Killed\n",
    )
    make_run(results, "eval_opt-math-tiny-isolated-s0", job={"backend": "local", "job_id": str(dead_pid())}, progress=5)
    make_run(results, "eval_opt-code-tiny-shared-s0", done=30, done_hash="old")  # done.json of another config
    make_run(results, "eval_opt-code-tiny-isolated-s0", job={"backend": "slurm", "job_id": "105"}, progress=20)
    monkeypatch.setattr(
        status_module,
        "slurm_states",
        lambda: {"101": "PENDING", "102": "RUNNING", "104": "CANCELLED", "105": "REQUEUED"},
    )
    rows = {r.run: r for r in status_module.matrix_status(config, results)}
    assert len(rows) == 14
    got = {run: (r.state, r.detail) for run, r in rows.items()}
    assert got["voting-math-tiny-shared-s0"][0] == "done"
    assert got["voting-math-tiny-isolated-s0"] == ("queued", "job 101 pending")
    assert got["voting-code-tiny-shared-s0"] == ("running", "step 7/30 (job 102)")
    assert got["voting-code-tiny-isolated-s0"] == (
        "failed",
        "TrainingError: run voting-code-tiny-isolated-s0: 11 steps skipped",
    )
    assert got["eval_opt-math-tiny-shared-s0"][0] == "failed"
    assert "job 104 cancelled at step 4/30" in got["eval_opt-math-tiny-shared-s0"][1]
    assert "srun: error: node01: task 0: Killed" in got["eval_opt-math-tiny-shared-s0"][1]
    assert got["eval_opt-math-tiny-isolated-s0"][0] == "interrupted"
    assert "step 5/30" in got["eval_opt-math-tiny-isolated-s0"][1]
    assert got["eval_opt-code-tiny-shared-s0"][0] == "outdated"  # not done under its current config
    assert got["eval_opt-code-tiny-isolated-s0"] == ("queued", "job 105 requeued, resumes at step 20/30")
    assert got["single-math-tiny-shared-s0"][0] == "not started"
    table = status_module.format_table(list(rows.values()))
    assert "14 runs: 1 done, 2 failed, 1 interrupted, 6 not started, 1 outdated, 2 queued, 1 running" in table


def test_cli_reads_the_matrix_like_snakemake(tmp_path):
    results = tmp_path / "results"
    make_run(results, "single-math-qwen3-0.6b-shared-s1", done=30)
    cmd = ["python", "-m", "trainer", "status", "--config-file", "config.yaml", "--results", str(results)]
    out = subprocess.run(
        cmd + ["--config", "matrix=paper", "--json"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    rows = json.loads(out)
    assert len(rows) == 126
    assert {r["run"]: r["state"] for r in rows}["single-math-qwen3-0.6b-shared-s1"] == "done"
    five = subprocess.run(
        cmd + ["--matrix", "paper", "--config", "seeds=[0,1,2,3,4]"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert five.strip().splitlines()[-1] == "210 runs: 1 done, 209 not started"
    bad = subprocess.run(cmd + ["--config", "matrix=nope"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "matrix: 'nope' is not one of matrices" in bad.stderr


def test_snakemake_status_lists_runs_and_schedules_nothing_else(workdir):
    make_run(workdir / "results", "voting-math-tiny-shared-s0", done=30)
    dry = snakemake("status", "-n", cwd=workdir).stdout
    assert "rule status" in dry and "rule train" not in dry and "rule base_model" not in dry
    snakemake("status", "--cores", "1", cwd=workdir)
    log = (workdir / "results" / "logs" / "status.log").read_text()
    assert re.search(r"^voting-math-tiny-shared-s0\s+done\s", log, flags=re.MULTILINE)
    assert "14 runs: 1 done, 13 not started" in log
    assert not (workdir / "results" / "models").exists()
    paper = snakemake("status", "--cores", "1", "--config", "matrix=paper", cwd=workdir)
    assert paper.returncode == 0
    assert "126 runs: 126 not started" in (workdir / "results" / "logs" / "status.log").read_text()


def shell_commands(dry_run_output: str) -> dict[str, str]:
    """run id -> its train shell command, from `snakemake -n -p`."""
    return {
        m.group(2): m.group(1)
        for m in re.finditer(
            r"^(?:Shell command: )?(?:env [^p]\S* (?:\S+=\S+ )*)*(python -m trainer launch .*?--run-dir results/runs/(\S+).*)$",
            dry_run_output,
            flags=re.MULTILINE,
        )
    }


@pytest.mark.parametrize(
    "restart, expected",
    [
        ("voting-math-tiny-shared-s0", {"voting-math-tiny-shared-s0"}),
        (
            "[voting-math-tiny-shared-s0,single-code-tiny-shared-s0]",
            {"voting-math-tiny-shared-s0", "single-code-tiny-shared-s0"},
        ),
        ("all", None),
    ],
)
def test_restart_switch_adds_restart_to_the_named_runs_only(restart, expected):
    commands = shell_commands(snakemake("-n", "-p", "--config", f"restart={restart}").stdout)
    assert len(commands) == 14
    restarted = {run for run, cmd in commands.items() if cmd.rstrip().split(" 2>&1")[0].endswith("--restart")}
    assert restarted == (expected if expected is not None else set(commands))
    plain = shell_commands(snakemake("-n", "-p").stdout)
    assert not any("--restart" in cmd for cmd in plain.values())


def test_restart_of_an_unknown_run_is_refused_naming_it():
    proc = snakemake("-n", "--config", "restart=voting-math-tiny-shared-s9", check=False)
    assert proc.returncode != 0
    assert "restart: 'voting-math-tiny-shared-s9' is not a run of matrix 'demo'" in proc.stdout + proc.stderr


def test_a_running_run_shows_its_last_eval_and_peak_so_far(tmp_path, monkeypatch):
    import pandas as pd

    results = tmp_path / "results"
    run_dir = make_run(results, "voting-code-tiny-shared-s0", job={"backend": "slurm", "job_id": "102"}, progress=12)
    pd.DataFrame(
        {
            "step": [0, 5, 10, 0, 5, 10],
            "split": ["functions"] * 3 + ["other"] * 3,
            "accuracy": [0.30, 0.55, 0.42, 0.9, 0.9, 0.9],
        }
    ).to_parquet(run_dir / "work" / "eval.parquet")
    got = status_module.run_status("voting-code-tiny-shared-s0", run_dir, {"102": "RUNNING"})
    assert (got.state, got.detail) == ("running", "step 12/30, eval 0.420@10, peak 0.550@5 (job 102)")
