"""Preemption pieces that need no cluster: the stop flag checked before each generation call, and
the warning (launcher log and `status`) when launcher.signal_delay_s is shorter than the measured
update + checkpoint time. The requeue itself is tested on SLURM (test_slurm_resilience)."""

from __future__ import annotations

import threading

import pytest

from tests.test_status import make_run
from trainer.contract.rundir import write_json_atomic
from trainer.rl.stopping import StoppableGenerator, StopRequested
from trainer.sweep import status as status_module
from trainer.sweep.job_watch import grace_warning, warn_on_short_grace


def test_generation_stops_at_the_next_call_once_the_flag_is_set() -> None:
    calls = []
    gen = StoppableGenerator(lambda role, prompts: calls.append(role) or ["x"] * len(prompts))
    gen.generated_tokens = 0  # the wrapped backend's attributes stay reachable
    gen.stop = threading.Event()
    assert gen("generator", ["p"]) == ["x"]
    gen.stop.set()
    with pytest.raises(StopRequested, match="evaluator"):
        gen("evaluator", ["p"])
    assert calls == ["generator"]


def slurm_cfg(delay: float) -> dict:
    return {"run": "r", "launcher": {"backend": "slurm", "signal_delay_s": delay}}


def test_grace_warning_when_the_signal_delay_is_shorter_than_update_and_checkpoint(tmp_path, capsys) -> None:
    progress = {"step": 3, "update_s": 50.0, "checkpoint_s": 20.0}
    assert grace_warning(slurm_cfg(120), progress) is None
    warning = grace_warning(slurm_cfg(60), progress)
    assert "launcher.signal_delay_s = 60s" in warning and "above 70" in warning
    assert grace_warning({"run": "r", "launcher": {"backend": "local", "signal_delay_s": 1}}, progress) is None

    run_dir = tmp_path / "r"
    (run_dir / "work").mkdir(parents=True)
    write_json_atomic(progress, run_dir / "work" / "progress.json")
    import io

    out, warned = io.StringIO(), set()
    for _ in range(3):  # polled every interval, written once
        warn_on_short_grace(slurm_cfg(60), run_dir, warned, out)
    assert out.getvalue().count("signal_delay_s = 60s") == 1


def test_status_shows_the_grace_warning(tmp_path, monkeypatch) -> None:
    results = tmp_path / "results"
    run_dir = make_run(results, "voting-math-tiny-shared-s0", job={"backend": "slurm", "job_id": "7"}, progress=3)
    config = {"run": "voting-math-tiny-shared-s0", "config_hash": "h1", "training": {"max_steps": 30}, **slurm_cfg(10)}
    write_json_atomic(config, run_dir / "config.json")
    write_json_atomic(
        {"step": 3, "max_steps": 30, "phase": "training", "update_s": 30.0, "checkpoint_s": 5.0},
        run_dir / "work" / "progress.json",
    )
    row = status_module.run_status("voting-math-tiny-shared-s0", run_dir, {"7": "RUNNING"})
    assert row.state == "running" and "launcher.signal_delay_s = 10s is shorter" in row.detail
