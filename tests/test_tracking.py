"""Trackers (trainer/rl/tracking.py): a tiny run that dies after a checkpoint and resumes makes one tracker run
with every step once and the parquet's values; a tracker that raises on every call changes nothing."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.resilience import assert_same_logs, published_logs, tiny_base_model, tiny_run_config
from trainer.rl import tracking
from trainer.rl.run import run_training
from trainer.rl.train import Trainer
from trainer.sweep.launch import write_run_config

RUN = "voting-math-tiny-isolated-s0"
TIMES = ("wall_time_s", "finished_at")


@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    return json.loads(tiny_base_model(tmp_path_factory).read_text())


@pytest.fixture(scope="module")
def reference(tmp_path_factory, base_model):
    """The same run without a tracker."""
    run_dir = tmp_path_factory.mktemp("ref") / RUN
    write_run_config(tiny_run_config(RUN), base_model, run_dir)
    run_training(run_dir)
    return run_dir


def make_run(tmp_path, base_model, backend: str):
    run_dir = tmp_path / "results" / "runs" / RUN
    rc = tiny_run_config(RUN)
    rc["tracking"] = {"backend": backend, "project": "test", "dir": str(tmp_path / "store")}
    write_run_config(rc, base_model, run_dir)
    return run_dir


def die_at_step_3(monkeypatch):
    """The process dies in step 3, after the step-2 checkpoint (and its tracker flush)."""
    original = Trainer.train_step

    def train_step(self, step):
        if step == 3:
            raise KeyboardInterrupt("killed in step 3")
        return original(self, step)

    monkeypatch.setattr(Trainer, "train_step", train_step)


def mlflow_history(store) -> dict[str, list[tuple[int, float]]]:
    import os

    from mlflow.tracking import MlflowClient

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")

    client = MlflowClient(tracking_uri=(store / "mlruns").resolve().as_uri())
    runs = client.search_runs([client.get_experiment_by_name("test").experiment_id])
    assert len(runs) == 1, f"{len(runs)} tracker runs for one run id"
    return {k: [(m.step, m.value) for m in client.get_metric_history(runs[0].info.run_id, k)]
            for k in runs[0].data.metrics}


def tensorboard_history(store) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    runs = list((store / "tensorboard" / "test").iterdir())
    assert [r.name for r in runs] == [RUN]
    acc = EventAccumulator(str(runs[0]), size_guidance={"scalars": 0})
    acc.Reload()
    return {k: [(e.step, e.value) for e in acc.Scalars(k)] for k in acc.Tags()["scalars"]}


def expected_history(run_dir) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for name, key in (("train", "role"), ("eval", "split")):
        df = pd.read_parquet(run_dir / f"{name}.parquet")
        for col in ("reward_mean", "grad_norm", "entropy") if name == "train" else ("accuracy",):
            for k, g in df.groupby(key):
                out[f"{name}/{k}/{col}"] = [(int(s), float(v)) for s, v in zip(g["step"], g[col]) if pd.notna(v)]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["mlflow", "tensorboard"])
def test_killed_and_resumed_run_is_one_tracker_run_with_every_step_once(tmp_path, base_model, reference,
                                                                         monkeypatch, backend):
    pytest.importorskip({"mlflow": "mlflow", "tensorboard": "tensorboard"}[backend])
    run_dir = make_run(tmp_path, base_model, backend)
    with monkeypatch.context() as m:
        die_at_step_3(m)
        with pytest.raises(KeyboardInterrupt):
            run_training(run_dir)
    assert json.loads((run_dir / "work" / tracking.TRACKING_JSON).read_text())["flushed_step"] == 2
    run_training(run_dir)
    assert_same_logs(published_logs(run_dir), published_logs(reference))
    got = (mlflow_history if backend == "mlflow" else tensorboard_history)(tmp_path / "store")
    for key, want in expected_history(run_dir).items():
        steps = [s for s, _ in got[key]]
        assert steps == sorted(set(steps)) == [s for s, _ in want], f"{key}: steps {steps}"
        assert [v for _, v in got[key]] == pytest.approx([v for _, v in want], rel=1e-6), key  # TB keeps float32


class Raising:
    """A tracker whose every call raises."""

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
    assert tracking.tracking_settings({})["backend"] == "none"
    with pytest.raises(ValueError, match="tracking: unknown key.*projekt"):
        tracking.tracking_settings({"tracking": {"projekt": "x"}})
    with pytest.raises(ValueError, match="tracking.backend: 'wandb'"):
        tracking.tracking_settings({"tracking": {"backend": "wandb"}})
