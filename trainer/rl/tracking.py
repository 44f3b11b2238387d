"""Optional experiment trackers: the run's logs mirrored to MLflow, TensorBoard or Weights & Biases, one tracker
run per run id (docs/tracking.md).

The parquet files stay the source of truth. What is mirrored, under namespaced keys:
- the resolved run config, once, when the tracker run is created;
- per step and role every numeric train.parquet column as `train/<role>/<column>`;
- per eval every numeric eval.parquet column as `eval/<split>/<column>`;
- per warning `warnings/<role>/<detector>` = the detector's value at its onset step.

Every completed step (its eval included) is flushed to the tracker at once, only the rows after the last
flushed step, which work/tracking.json records with the tracker's own run id; a resumed run reopens that
tracker run. A resume rewinds to the last checkpoint, so the steps after it, flushed already, are computed
again (to the same rows: a resume is exact). Per backend, no step twice and none missing:
- mlflow and wandb: the recomputed steps are not sent again (only steps after the flushed one);
- tensorboard: the writer reopens with purge_step = the checkpoint's step + 1, which drops the events of the
  steps after it, and the recomputed steps are written again.
A tracker failure is logged and never stops training (its rows are retried at the next flush).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainer.contract import rundir
from trainer.contract.runid import parse_run_id
from trainer.rl import wandb_log
from trainer.settings import TrackingSettings

TRACKING_JSON = "tracking.json"  # under work/: backend, the tracker's run id, the last flushed step


def metric_dict(
    rows: list[dict[str, Any]], prefix: str, key: str, skip: tuple[str, ...]
) -> dict[int, dict[str, float]]:
    """Per step: `{prefix}/{row[key]}/{column}` -> value for every finite numeric column of `rows`."""
    out: dict[int, dict[str, float]] = {}
    for r in rows:
        for col, v in r.items():
            if col in skip or isinstance(v, (str, bool)) or v is None:
                continue
            if isinstance(v, (int, float)) and math.isfinite(float(v)):
                out.setdefault(int(r["step"]), {})[f"{prefix}/{r[key]}/{col}"] = float(v)
    return out


def reset_state(work: Path) -> None:
    """A restart (checkpoints discarded): the next tracker run is a new one; wandb's id counts the restarts."""
    path = Path(work) / TRACKING_JSON
    restarts = json.loads(path.read_text()).get("restarts", 0) + 1 if path.exists() else 0
    path.unlink(missing_ok=True)
    if restarts:
        rundir.write_json_atomic({"restarts": restarts}, path)


def wandb_run_id(run: str, config_hash: str, restarts: int = 0) -> str:
    """The wandb run id of a run: stable across requeues and clusters (run id and config hash), new at a restart."""
    digest = hashlib.sha256(f"{run}:{config_hash}:{restarts}".encode()).hexdigest()[:12]
    return f"{run[:48]}-{digest}"


def mlflow_uri(settings: TrackingSettings, store: Path) -> str:
    """tracking.mlflow_tracking_uri, else MLFLOW_TRACKING_URI, else a file store under the tracking dir."""
    return (
        settings.mlflow_tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or (store / "mlruns").resolve().as_uri()
    )


class MlflowBackend:
    """MLflow through its client: a server (tracking.mlflow_tracking_uri) or a local file store."""

    rewinds = False

    def __init__(self, settings: TrackingSettings, store: Path):
        # MLflow 3 refuses its file store unless told (it prefers a database); the file store is what works
        # offline on a compute node with mlflow-skinny alone, so opt in for this process
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=mlflow_uri(settings, store))
        self.project = settings.project
        self.tags = settings.tags

    def open(self, run: str, tracker_id: str | None, config: dict[str, Any], purge_step: int, restarts: int) -> str:
        if tracker_id:
            self.client.update_run(tracker_id, status="RUNNING")
            return tracker_id
        exp = self.client.get_experiment_by_name(self.project)
        exp_id = exp.experiment_id if exp else self.client.create_experiment(self.project)
        created = self.client.create_run(exp_id, run_name=run, tags={"run_id": run, **{t: "" for t in self.tags}})
        self.client.log_text(created.info.run_id, json.dumps(config, indent=1, sort_keys=True), "config.json")
        return created.info.run_id

    def log(self, tracker_id: str, metrics: dict[int, dict[str, float]]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(k, v, now, step) for step, kv in sorted(metrics.items()) for k, v in kv.items()]
        for i in range(0, len(batch), 1000):  # MLflow's log_batch limit
            self.client.log_batch(tracker_id, metrics=batch[i : i + 1000])

    def close(self, tracker_id: str, finished: bool) -> None:
        self.client.set_terminated(tracker_id, status="FINISHED" if finished else "KILLED")

    def held_step(self, tracker_id: str) -> int | None:
        return None  # log_batch returns once the server holds the metrics: tracking.json is right


class TensorboardBackend:
    """TensorBoard event files under `<dir>/tensorboard/<project>/<run>` (torch's SummaryWriter)."""

    rewinds = True  # purge_step drops the steps after the checkpoint a resume starts from

    def __init__(self, settings: TrackingSettings, store: Path):
        self.root = store / "tensorboard" / settings.project
        self.writer = None

    def open(self, run: str, tracker_id: str | None, config: dict[str, Any], purge_step: int, restarts: int) -> str:
        from torch.utils.tensorboard import SummaryWriter

        # purge_step: TensorBoard drops events at or after it from an earlier session (a flush cut short)
        self.writer = SummaryWriter(log_dir=str(self.root / run), purge_step=purge_step if tracker_id else None)
        if not tracker_id:
            self.writer.add_text("config", json.dumps(config, indent=1, sort_keys=True), 0)
        return str(self.root / run)

    def log(self, tracker_id: str, metrics: dict[int, dict[str, float]]) -> None:
        for step, kv in sorted(metrics.items()):
            for k, v in kv.items():
                self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def close(self, tracker_id: str, finished: bool) -> None:
        self.writer.close()

    def held_step(self, tracker_id: str) -> int | None:
        return None  # each log ends with a flush of the event file


class WandbBackend:
    """Weights & Biases: one wandb run per run id (wandb_run_id), its config the run's config and hash, grouped by
    cell so that seeds show together; WANDB_MODE=offline writes `<dir>/wandb/offline-run-*` for `wandb sync`."""

    rewinds = False

    def __init__(self, settings: TrackingSettings, store: Path):
        import wandb

        self.wandb, self.store, self.settings, self.handle = wandb, store, settings, None

    def open(self, run: str, tracker_id: str | None, config: dict[str, Any], purge_step: int, restarts: int) -> str:
        run_id = tracker_id or wandb_run_id(run, config.get("config_hash", ""), restarts)
        self.store.mkdir(parents=True, exist_ok=True)
        quiet = self.wandb.Settings(
            console="off",
            x_disable_stats=True,
            save_code=False,
            disable_git=True,
            silent=True,
            x_save_requirements=False,
        )
        self.handle = self.wandb.init(
            project=self.settings.project,
            id=run_id,
            name=run,
            resume="allow",
            group=parse_run_id(run).cell,
            tags=list(self.settings.tags) or None,
            config=config,
            dir=str(self.store),
            reinit="create_new",
            settings=quiet,
        )
        return run_id

    def log(self, tracker_id: str, metrics: dict[int, dict[str, float]]) -> None:
        for step, kv in sorted(metrics.items()):  # one history row per step, in step order
            self.handle.log(kv, step=step)

    def close(self, tracker_id: str, finished: bool) -> None:
        self.handle.finish(exit_code=0 if finished else 1)

    def held_step(self, tracker_id: str) -> int | None:
        """The last step wandb holds: a killed process's last records never reached its files or the server."""
        if self.handle.offline:
            return wandb_log.last_step(self.store, tracker_id)
        return self.handle.starting_step - 1 if self.handle.resumed else -1


# one class per tracker trainer.settings.TRACKING_BACKENDS allows beside `none` (tests/test_config_schema.py checks)
BACKEND_CLASSES = {"mlflow": MlflowBackend, "tensorboard": TensorboardBackend, "wandb": WandbBackend}


class Tracker:
    """The trainer's one handle on a tracker; every call is guarded: a failure is logged, never raised."""

    def __init__(
        self, settings: TrackingSettings, run_config: dict[str, Any], run_dir: Path, log: Callable[[str], None]
    ):
        """`settings`: the run's tracking section; `run_config`: its config.json, recorded as the tracker run's config."""
        self.settings, self.cfg, self.log, self.run = settings, run_config, log, run_config["run"]
        self.state_path = Path(run_dir) / rundir.WORK_DIR / TRACKING_JSON
        store = Path(settings.dir) if settings.dir else Path(run_dir).resolve().parent.parent / "tracking"
        self.backend = None
        if settings.backend != "none":
            self.backend = self._guard("start", lambda: BACKEND_CLASSES[settings.backend](settings, store))
        self.state = json.loads(self.state_path.read_text()) if self.state_path.exists() else {}
        self.tracker_id: str | None = None

    def _guard(self, what: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except Exception as e:  # the parquet files are the truth: training goes on
            self.log(f"tracking ({self.settings.backend}) failed at {what}: {type(e).__name__}: {e}; training goes on")
            return None

    def resume_at(self, step: int) -> None:
        """The run resumed from the checkpoint of `step`: a backend that rewinds gets the steps after it again."""
        if self.backend is not None and self.backend.rewinds and int(self.state.get("flushed_step", -1)) > step:
            self.state = {**self.state, "flushed_step": step}

    def _open(self) -> bool:
        """Create or reopen the tracker run; lower the flushed step to what the tracker holds (a SIGKILL may
        have lost records that tracking.json counts as sent)."""
        after = int(self.state.get("flushed_step", -1))
        self.tracker_id = self._guard(
            "open",
            lambda: self.backend.open(
                self.run, self.state.get("tracker_id"), self.cfg, after + 1, int(self.state.get("restarts", 0))
            ),
        )
        if self.tracker_id is None:
            return False
        held = self._guard("read back", lambda: self.backend.held_step(self.tracker_id))
        if held is not None and held < after:
            self.log(
                f"tracking ({self.settings.backend}): the tracker holds steps up to {held}, not {after} "
                f"(the last process was killed before they were written); sending the steps after {held}"
            )
            self.state = {**self.state, "flushed_step": held}
        return True

    def flush(
        self, upto: int, train: list[dict], evals: list[dict], warnings: list[dict], finished: bool = False
    ) -> None:
        """Send the rows of steps (last flushed, upto] to the tracker, then record `upto` as flushed."""
        if self.backend is None:
            return
        if self.tracker_id is None and not self._open():
            return
        after = int(self.state.get("flushed_step", -1))
        if upto <= after:  # a recomputed step, sent already (or rewound and sent again by a later flush)
            if finished:
                self._guard("close", lambda: self.backend.close(self.tracker_id, True))
            return
        metrics: dict[int, dict[str, float]] = {}
        for rows, prefix, key, skip in (
            (train, "train", "role", ("step", "time_s")),
            (evals, "eval", "split", ("step", "time_s")),
            (warnings, "warnings", "role", ("step",)),
        ):
            mine = [r for r in rows if after < int(r["step"]) <= upto]
            if prefix == "warnings":
                mine = [{"step": r["step"], "role": r["role"], r["detector"]: r["value"]} for r in mine]
            for step, kv in metric_dict(mine, prefix, key, skip).items():
                metrics.setdefault(step, {}).update(kv)
        if self._guard("log", lambda: self.backend.log(self.tracker_id, metrics) or True):
            self.state = {
                "backend": self.settings.backend,
                "tracker_id": self.tracker_id,
                "flushed_step": upto,
                "restarts": int(self.state.get("restarts", 0)),
            }
            rundir.write_json_atomic(self.state, self.state_path)
        if finished:
            self._guard("close", lambda: self.backend.close(self.tracker_id, True))
