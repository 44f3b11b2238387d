"""Trackers (trainer/rl/tracking.py; docs/tracking.md): a tiny run SIGKILLed after step 3 (its checkpoint at step 2)
and resumed makes one tracker run whose history equals train.parquet and eval.parquet step for step: wandb in
offline mode (its run files read back), a real `mlflow server` on the loopback address (read back through
MlflowClient) and TensorBoard. A tracker that raises on every call changes nothing."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.network import free_port
from tests.resilience import assert_same_logs, progress_step, published_logs, start_trainer, wait_for
from tests.runs import tiny_run_config
from trainer.rl import tracking, wandb_log
from trainer.rl.run import run_training
from trainer.rl.train import Trainer
from trainer.settings import TrackingSettings, from_dict
from trainer.sweep.launch import write_run_config

RUN = "voting-math-tiny-isolated-s0"
TIMES = ("wall_time_s", "finished_at")


@pytest.fixture(scope="module")
def reference(tmp_path_factory, base_model):
    """The same run without a tracker."""
    run_dir = tmp_path_factory.mktemp("ref") / RUN
    write_run_config(tiny_run_config(RUN), base_model, run_dir)
    run_training(run_dir)
    return run_dir


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """A real `mlflow server` on 127.0.0.1 (a free port, a temporary SQLite store); its URI."""
    pytest.importorskip("mlflow.server")
    d = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{d / 'mlflow.db'}",
            "--artifacts-destination",
            str(d / "artifacts"),
        ],
        stdout=open(d / "server.log", "w"),
        stderr=subprocess.STDOUT,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(uri), proc, 120, "mlflow server", d / "server.log")
        yield uri
    finally:
        proc.terminate()
        proc.wait(30)


def _answers(uri: str) -> bool:
    import urllib.request

    try:
        return urllib.request.urlopen(f"{uri}/health", timeout=2).status == 200
    except OSError:
        return False


def make_run(tmp_path, base_model, backend: str, **settings) -> Path:
    run_dir = tmp_path / "results" / "runs" / RUN
    rc = tiny_run_config(RUN)
    rc["tracking"] = {"backend": backend, "project": "test", "dir": str(tmp_path / "store"), **settings}
    write_run_config(rc, base_model, run_dir)
    return run_dir


def sigkill_after_step_3(run_dir: Path, tmp_path: Path) -> None:
    """`trainer train` in a subprocess, SIGKILLed in step 4: step 3 flushed to the tracker, the checkpoint at 2."""
    log = tmp_path / "killed.log"
    proc = start_trainer(run_dir, log, TRAINER_TEST_PAUSE_AT="step", TRAINER_TEST_PAUSE_S="1")
    try:
        wait_for(lambda: progress_step(run_dir) >= 3, proc, 300, "step 3", log)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert json.loads((run_dir / "work" / tracking.TRACKING_JSON).read_text())["flushed_step"] == 3
    assert sorted(p.name for p in (run_dir / "work" / "checkpoints").iterdir())[-1] == "step-000002"


def wandb_history(store: Path, want_id: str) -> dict[str, list[tuple[int, float]]]:
    """The run's offline segments in order (what `wandb sync` uploads), read back from their transaction logs."""
    out: dict[str, list[tuple[int, float]]] = {}
    files = wandb_log.segments(store, want_id)
    assert len(files) == 2 and len(list(store.glob("wandb/offline-run-*"))) == 2, f"one segment a process: {files}"
    for f in files:
        for r in wandb_log.records(f):
            kind = r.WhichOneof("record_type")
            if kind == "run":
                assert (r.run.run_id, r.run.run_group, r.run.project) == (want_id, RUN[:-3], "test")
                assert {u.key for u in r.run.config.update} >= {"config_hash", "training", "model"}
            elif kind == "history":
                for item in r.history.item:
                    key = wandb_log.history_key(item)
                    if not key.startswith("_"):
                        out.setdefault(key, []).append((r.history.step.num, float(json.loads(item.value_json))))
    return out


def mlflow_history(uri: str) -> dict[str, list[tuple[int, float]]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("test").experiment_id])
    assert len(runs) == 1, f"{len(runs)} tracker runs for one run id"
    assert runs[0].info.status == "FINISHED"
    return {
        k: [(m.step, m.value) for m in client.get_metric_history(runs[0].info.run_id, k)] for k in runs[0].data.metrics
    }


def tensorboard_history(store: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    runs = list((store / "tensorboard" / "test").iterdir())
    assert [r.name for r in runs] == [RUN]
    acc = EventAccumulator(str(runs[0]), size_guidance={"scalars": 0})
    acc.Reload()
    return {k: [(e.step, e.value) for e in acc.Scalars(k)] for k in acc.Tags()["scalars"]}


def expected_history(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every finite numeric column of train.parquet and eval.parquet, per role / split, step by step."""
    out: dict[str, list[tuple[int, float]]] = {}
    for name, key in (("train", "role"), ("eval", "split")):
        df = pd.read_parquet(run_dir / f"{name}.parquet")
        for col in df.columns:
            if col in ("step", "time_s", key) or df[col].dtype == bool or not pd.api.types.is_numeric_dtype(df[col]):
                continue
            for k, g in df.groupby(key):
                rows = [(int(s), float(v)) for s, v in zip(g["step"], g[col]) if math.isfinite(v)]
                if rows:
                    out[f"{name}/{k}/{col}"] = rows
    return out


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["wandb", "mlflow", "tensorboard"])
def test_sigkilled_and_resumed_run_is_one_tracker_run_equal_to_the_parquet(
    tmp_path, base_model, reference, monkeypatch, request, backend
):
    pytest.importorskip(backend)
    settings = {"mlflow_tracking_uri": request.getfixturevalue("mlflow_server")} if backend == "mlflow" else {}
    monkeypatch.setenv("WANDB_MODE", "offline")  # compute nodes without internet; no server reachable here
    run_dir = make_run(tmp_path, base_model, backend, **settings)
    sigkill_after_step_3(run_dir, tmp_path)
    run_training(run_dir)  # resumes from step 2: steps 3 and 4 computed again
    assert_same_logs(published_logs(run_dir), published_logs(reference))
    cfg = json.loads((run_dir / "config.json").read_text())
    store = tmp_path / "store"
    got = {
        "wandb": lambda: wandb_history(store, tracking.wandb_run_id(RUN, cfg["config_hash"])),
        "mlflow": lambda: mlflow_history(settings.get("mlflow_tracking_uri")),
        "tensorboard": lambda: tensorboard_history(store),
    }[backend]()
    want = expected_history(run_dir)
    assert set(want) <= set(got), f"not mirrored: {sorted(set(want) - set(got))}"
    assert {k for k in got if not k.startswith("warnings/")} == set(want), "a key that is in no parquet"
    for key, rows in want.items():
        assert [s for s, _ in got[key]] == [s for s, _ in rows], f"{key}: steps {[s for s, _ in got[key]]}"
        assert [v for _, v in got[key]] == pytest.approx([v for _, v in rows], rel=1e-6), key  # TB keeps float32


def test_a_restart_is_a_new_wandb_run_and_the_id_is_stable(tmp_path):
    a = tracking.wandb_run_id(RUN, "h1")
    assert a == tracking.wandb_run_id(RUN, "h1") != tracking.wandb_run_id(RUN, "h2") and a.startswith(RUN)
    tracking.reset_state(tmp_path)
    assert not (tmp_path / tracking.TRACKING_JSON).exists()
    (tmp_path / tracking.TRACKING_JSON).write_text(json.dumps({"tracker_id": a, "flushed_step": 3}))
    tracking.reset_state(tmp_path)
    assert json.loads((tmp_path / tracking.TRACKING_JSON).read_text()) == {"restarts": 1}


def test_the_tracking_uri_comes_from_the_config_else_the_environment(tmp_path, monkeypatch):
    settings = TrackingSettings()
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking.mlflow_uri(settings, tmp_path) == (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5001")
    assert tracking.mlflow_uri(settings, tmp_path) == "http://127.0.0.1:5001"
    given = TrackingSettings(mlflow_tracking_uri="http://127.0.0.1:5002")
    assert tracking.mlflow_uri(given, tmp_path) == "http://127.0.0.1:5002"


class Raising:
    """A tracker whose every call raises."""

    rewinds = False

    def __init__(self, settings, store):
        pass

    def __getattr__(self, name):
        def fail(*args, **kwargs):
            raise RuntimeError(f"tracker down ({name})")

        return fail


@pytest.mark.slow
def test_a_raising_tracker_changes_nothing(tmp_path, base_model, reference, monkeypatch):
    monkeypatch.setitem(tracking.BACKEND_CLASSES, "mlflow", Raising)
    run_dir = make_run(tmp_path, base_model, "mlflow")
    lines: list[str] = []
    done = Trainer(json.loads((run_dir / "config.json").read_text()), run_dir, log=lines.append).fit()
    assert_same_logs(published_logs(run_dir), published_logs(reference))
    ref_done = json.loads((reference / "done.json").read_text())
    assert {k: v for k, v in done.items() if k not in TIMES} == {k: v for k, v in ref_done.items() if k not in TIMES}
    assert any("tracking (mlflow) failed at open: RuntimeError: tracker down" in line for line in lines)


def test_tracking_settings_name_bad_keys():
    assert from_dict(TrackingSettings, {}, "tracking").backend == "none"
    assert from_dict(TrackingSettings, {"backend": "wandb"}, "tracking").backend == "wandb"
    with pytest.raises(ValueError, match="tracking.projekt: unknown key"):
        from_dict(TrackingSettings, {"projekt": "x"}, "tracking")
    with pytest.raises(ValueError, match="tracking.backend: 'neptune' is not one of none, mlflow"):
        from_dict(TrackingSettings, {"backend": "neptune"}, "tracking")
