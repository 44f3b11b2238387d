"""An eval that a requeue interrupts is resumed, not restarted: its finished chunks of problems are saved
as they go (work/eval_progress/), the rerun generates only the chunks left, and eval.parquet and
samples.parquet equal an uninterrupted run's.

Two interruptions: a SIGKILL in the middle of the step-0 eval (no checkpoint yet), and a job signal
(the `stop` event SLURM's timeout or preemption sets) in the middle of the step-2 eval, which
checkpoints the step and ends; the rerun counts its generate calls.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest

from tests.resilience import assert_same_logs, published_logs, start_trainer, wait_for
from tests.runs import tiny_run_config
from trainer.contract import rundir
from trainer.rl import evaluation
from trainer.rl.rollout import HFGenerator
from trainer.rl.run import run_training
from trainer.sweep.launch import write_run_config

RUN = "voting-math-tiny-isolated-s0"  # two generate calls per chunk: the voters', the aggregator's
# 12 eval problems in chunks of 4: three chunks per eval (at steps 0 and 2)
SCHEDULE = {
    "max_steps": 2,
    "eval_every": 2,
    "save_every": 2,
    "eval_problems": 12,
    "eval_chunk_problems": 4,
    "samples_per_eval": 4,
}
CALLS_PER_CHUNK = 2


@pytest.fixture(scope="module")
def reference(base_model, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("eval-resume") / "reference"
    write_run_config(tiny_run_config(RUN, SCHEDULE), base_model, run_dir)
    run_training(run_dir)
    return run_dir


def progress_dir(run_dir, step):
    return run_dir / rundir.WORK_DIR / rundir.EVAL_PROGRESS_DIR / f"step-{step:06d}"


@pytest.mark.slow
def test_a_job_killed_in_the_middle_of_an_eval_resumes_it_at_its_first_unfinished_chunk(
    reference, base_model, tmp_path, capsys
):
    run_dir, log = tmp_path / "killed", tmp_path / "train.log"
    write_run_config(tiny_run_config(RUN, SCHEDULE), base_model, run_dir)
    proc = start_trainer(run_dir, log, TRAINER_TEST_PAUSE_AT="generate", TRAINER_TEST_PAUSE_S="0.5")
    second = progress_dir(run_dir, 0) / "00-00001.pkl"
    wait_for(second.exists, proc, 300, "the step-0 eval's second chunk", log)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert sorted(p.name for p in progress_dir(run_dir, 0).glob("*.pkl")) == ["00-00000.pkl", "00-00001.pkl"]
    assert not (run_dir / rundir.DONE_JSON).exists()
    capsys.readouterr()
    run_training(run_dir)  # the requeued job (in this process: one start-up less)
    assert "step 0 eval: resumed 2 saved chunks" in capsys.readouterr().err
    assert_same_logs(published_logs(reference), published_logs(run_dir))
    assert not any((run_dir / rundir.WORK_DIR / rundir.EVAL_PROGRESS_DIR).iterdir())  # removed once done


@pytest.mark.slow
def test_a_signal_in_the_middle_of_an_eval_checkpoints_and_the_requeued_job_generates_only_what_is_left(
    reference, base_model, tmp_path, monkeypatch, capsys
):
    run_dir = tmp_path / "signalled"
    write_run_config(tiny_run_config(RUN, SCHEDULE), base_model, run_dir)
    stop, real_save = threading.Event(), evaluation.EvalProgress.save

    def save_then_signal(self, split, chunk, *args):  # SLURM's signal right after the step-2 eval's first chunk
        real_save(self, split, chunk, *args)
        if self.key["step"] == 2 and chunk == 0:
            stop.set()

    monkeypatch.setattr(evaluation.EvalProgress, "save", save_then_signal)
    assert run_training(run_dir, stop=stop) is None
    assert [p.name for p in rundir.checkpoints(run_dir / rundir.WORK_DIR)] == ["step-000002"]
    assert [p.name for p in progress_dir(run_dir, 2).iterdir()] == ["00-00000.pkl"]

    calls, real_call = [], HFGenerator.__call__

    def counted(self, role, prompts):
        calls.append(role)
        return real_call(self, role, prompts)

    monkeypatch.setattr(HFGenerator, "__call__", counted)
    capsys.readouterr()
    run_training(run_dir)
    assert "resumed from step-000002" in capsys.readouterr().err
    assert len(calls) == 2 * CALLS_PER_CHUNK  # chunks 1 and 2 of the step-2 eval; chunk 0 was saved
    assert_same_logs(published_logs(reference), published_logs(run_dir))
