"""The training job that the launcher submits (run in the SLURM, local or debug job, never on the
login node's launcher): trains in a worker thread and stops where it is on SLURM's signals."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from submitit.helpers import Checkpointable, DelayedSubmission

from trainer.contract import rundir
from trainer.settings import LauncherSettings, from_dict

TERMINATED_WAIT_S = 600  # a job stopped by SIGTERM waits this long for SLURM's SIGKILL (KillWait)
# Train jobs never reach the network: the prefetch rules put models and datasets in the cache first.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


class JobTerminated(RuntimeError):
    """SIGTERM stopped the job but SLURM never killed it."""


class TrainJob(Checkpointable):
    """The training job; on SLURM's signals it stops where it is and keeps every completed step.

    Training runs in a worker thread so that the main thread, where signal handlers run, can set
    the stop flag: the trainer abandons the rollout or eval in progress at its next generation call
    and checkpoints the state after its last completed step. Two signals:
    - submitit's USR2 (time limit, `signal_delay_s` before it): checkpoint(), then submitit requeues;
    - SIGTERM (`scontrol requeue`, preemption, scancel; SLURM kills the job KillWait later and
      requeues it itself): the same stop, then the job waits to be killed rather than returning, so
      that no result file says the run ended.
    """

    def __call__(self, run_dir: str, restart: bool = False) -> dict[str, Any] | None:
        # `restart` is accepted only for jobs pickled by an older launcher: restarts happen in the
        # launcher, before submission, so that a requeue (which reruns this pickle) never restarts.
        os.environ.update(OFFLINE_ENV)  # before the trainer imports huggingface_hub (read at import)
        from trainer.rl.run import run_training
        from trainer.sweep.prefetch import require_cached

        require_cached(json.loads((Path(run_dir) / rundir.CONFIG_JSON).read_text()))  # fail at once, offline

        self._stop, self._terminated = threading.Event(), False
        outcome: dict[str, Any] = {}

        def work() -> None:
            try:
                outcome["result"] = run_training(run_dir, stop=self._stop)
            except BaseException as e:  # handed to the main thread, which raises it
                outcome["error"] = e

        if os.environ.get("SLURM_JOB_ID"):
            signal.signal(signal.SIGTERM, self._on_sigterm)
        self._thread = threading.Thread(target=work, name="train", daemon=True)
        self._thread.start()
        while self._thread.is_alive():
            self._thread.join(timeout=1.0)  # short waits: the main thread must reach signal handlers
        if "error" in outcome:
            raise outcome["error"]
        if self._terminated and outcome.get("result") is None:
            time.sleep(TERMINATED_WAIT_S)  # SLURM's SIGKILL ends this; the requeued job resumes
            raise JobTerminated(f"job got SIGTERM but was not killed within {TERMINATED_WAIT_S}s")
        return outcome.get("result")

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        print(
            "SIGTERM (scontrol requeue, preemption or scancel): stopping now, keeping every completed step",
            file=sys.stderr,
            flush=True,
        )
        self._terminated = True
        self._stop.set()

    def checkpoint(self, run_dir: str, restart: bool = False) -> DelayedSubmission:
        """Stop training now (the step in progress is abandoned, the last completed one saved), requeue.

        Waits at most half of launcher.signal_delay_s: SLURM kills the job soon after the requeue,
        and a checkpoint cut short is discarded whole (the previous one is used).
        """
        thread = getattr(self, "_thread", None)
        if thread is not None and thread.is_alive():
            self._stop.set()
            cfg = json.loads((Path(run_dir) / rundir.CONFIG_JSON).read_text())
            grace = max(1.0, float(from_dict(LauncherSettings, cfg["launcher"], "launcher").signal_delay_s) / 2)
            print(
                f"[{cfg['run']}] signalled: stopping now, the step in progress is abandoned (waiting up to "
                f"{grace:.0f}s for the checkpoint)",
                file=sys.stderr,
                flush=True,
            )
            thread.join(timeout=grace)
        return DelayedSubmission(TrainJob(), run_dir)  # the requeued job resumes; it never restarts
