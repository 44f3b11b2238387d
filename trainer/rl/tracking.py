"""Optional experiment trackers: the run's logs mirrored to MLflow or TensorBoard, one tracker run per run id.

The parquet files stay the source of truth. What is mirrored, under namespaced keys:
- the resolved run config, once, when the tracker run is created;
- per step and role every numeric train.parquet column as `train/<role>/<column>`;
- per eval every numeric eval.parquet column as `eval/<split>/<column>`;
- per warning `warnings/<role>/<detector>` = the detector's value at its onset step.

No duplicated runs or steps after a restart: rows are flushed to the tracker after each checkpoint (and at
publish), only those after the last flushed step, which work/tracking.json records with the tracker's own
run id; a resumed run reopens that tracker run. A tracker failure is logged and never stops training (its
rows are retried at the next flush).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any, Callable

from trainer.settings import TrackingSettings
from trainer.sweep import rundir

BACKENDS = ("none", "mlflow", "tensorboard")
TRACKING_JSON = "tracking.json"  # under work/: backend, the tracker's run id, the last flushed step
DEFAULTS = dataclasses.asdict(TrackingSettings())  # their home: trainer.settings


def tracking_settings(run_config: dict[str, Any]) -> dict[str, Any]:
    """The run config's `tracking` section over the defaults (the one place that reads its keys)."""
    given = run_config.get("tracking") or {}
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"tracking: unknown key(s) {unknown}; known: {sorted(DEFAULTS)}")
    out = {**DEFAULTS, **given}
    if out["backend"] not in BACKENDS:
        raise ValueError(f"tracking.backend: {out['backend']!r} is not one of {BACKENDS}")
    return out


def metric_dict(rows: list[dict[str, Any]], prefix: str, key: str, skip: tuple[str, ...]) -> dict[int, dict[str, float]]:
    """Per step: `{prefix}/{row[key]}/{column}` -> value for every finite numeric column of `rows`."""
    out: dict[int, dict[str, float]] = {}
    for r in rows:
        for col, v in r.items():
            if col in skip or isinstance(v, (str, bool)) or v is None:
                continue
            if isinstance(v, (int, float)) and math.isfinite(float(v)):
                out.setdefault(int(r["step"]), {})[f"{prefix}/{r[key]}/{col}"] = float(v)
    return out


class MlflowBackend:
    """MLflow through its client (local file store by default: `file:<dir>/mlruns`)."""

    def __init__(self, settings: dict[str, Any], store: Path):
        import os

        # MLflow 3 refuses its file store unless told (it prefers a database); the file store is what works
        # offline on a compute node with mlflow-skinny alone, so opt in for this process
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=(store / "mlruns").resolve().as_uri())
        self.project = settings["project"]
        self.tags = settings["tags"]

    def open(self, run: str, tracker_id: str | None, config: dict[str, Any], purge_step: int) -> str:
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
            self.client.log_batch(tracker_id, metrics=batch[i:i + 1000])

    def close(self, tracker_id: str, finished: bool) -> None:
        self.client.set_terminated(tracker_id, status="FINISHED" if finished else "KILLED")


class TensorboardBackend:
    """TensorBoard event files under `<dir>/tensorboard/<project>/<run>` (torch's SummaryWriter)."""

    def __init__(self, settings: dict[str, Any], store: Path):
        self.root = store / "tensorboard" / settings["project"]
        self.writer = None

    def open(self, run: str, tracker_id: str | None, config: dict[str, Any], purge_step: int) -> str:
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


BACKEND_CLASSES = {"mlflow": MlflowBackend, "tensorboard": TensorboardBackend}


class Tracker:
    """The trainer's one handle on a tracker; every call is guarded: a failure is logged, never raised."""

    def __init__(self, run_config: dict[str, Any], run_dir: Path, log: Callable[[str], None]):
        self.settings = tracking_settings(run_config)
        self.cfg, self.log, self.run = run_config, log, run_config["run"]
        self.state_path = Path(run_dir) / rundir.WORK_DIR / TRACKING_JSON
        store = Path(self.settings["dir"]) if self.settings["dir"] else Path(run_dir).resolve().parent.parent / "tracking"
        self.backend = None
        if self.settings["backend"] != "none":
            self.backend = self._guard("start", lambda: BACKEND_CLASSES[self.settings["backend"]](self.settings, store))
        self.state = json.loads(self.state_path.read_text()) if self.state_path.exists() else {}
        self.tracker_id: str | None = None

    def _guard(self, what: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except Exception as e:  # the parquet files are the truth: training goes on
            self.log(f"tracking ({self.settings['backend']}) failed at {what}: {type(e).__name__}: {e}; training goes on")
            return None

    def flush(self, upto: int, train: list[dict], evals: list[dict], warnings: list[dict], finished: bool = False) -> None:
        """Send the rows of steps (last flushed, upto] to the tracker, then record `upto` as flushed."""
        if self.backend is None:
            return
        after = int(self.state.get("flushed_step", -1))
        if self.tracker_id is None:
            self.tracker_id = self._guard("open", lambda: self.backend.open(self.run, self.state.get("tracker_id"),
                                                                           self.cfg, after + 1))
            if self.tracker_id is None:
                return
        metrics: dict[int, dict[str, float]] = {}
        for rows, prefix, key, skip in ((train, "train", "role", ("step", "time_s")),
                                        (evals, "eval", "split", ("step", "time_s")),
                                        (warnings, "warnings", "role", ("step",))):
            mine = [r for r in rows if after < int(r["step"]) <= upto]
            if prefix == "warnings":
                mine = [{"step": r["step"], "role": r["role"], r["detector"]: r["value"]} for r in mine]
            for step, kv in metric_dict(mine, prefix, key, skip).items():
                metrics.setdefault(step, {}).update(kv)
        if self._guard("log", lambda: self.backend.log(self.tracker_id, metrics) or True):
            self.state = {"backend": self.settings["backend"], "tracker_id": self.tracker_id, "flushed_step": upto}
            rundir.write_json_atomic(self.state, self.state_path)
        if finished:
            self._guard("close", lambda: self.backend.close(self.tracker_id, True))
