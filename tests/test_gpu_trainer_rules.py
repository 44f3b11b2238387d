"""The GPU path's rules for the trainer over a run, checked on CPU (a small random Qwen3, vLLM a recording
stand-in: tests/fake_vllm.py): the base model and the engine at the pinned revision, the engine put to sleep
between rollouts and update, a resumed run's weights synced before its first rollout, a checkpoint written on a
GPU resumed anywhere, and the backends closed when training fails. tests/test_gpu_vllm_rules.py checks the
engine's side."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch

from tests import fake_vllm

RUN = "voting-math-qwen3-0.6b-isolated-s0"  # two policies (generator, aggregator)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from tests.local_qwen3 import save_random_qwen3, small_vocab_tokenizer

    return save_random_qwen3(tmp_path_factory.mktemp("qwen3") / "model", small_vocab_tokenizer(), hidden_size=32)


def make_trainer(model_dir: Path, run_dir: Path, revision: str | None = None, **training):
    from tests.local_qwen3 import real_scale_config
    from trainer.rl.train import Trainer

    cfg = real_scale_config(model_dir, RUN, run_dir, training={"lora": {"r": 4, "lora_alpha": 8}, **training})
    if revision:
        cfg["model"]["revision"] = revision  # as the prefetch rule pins a hub id's commit
    return Trainer(cfg, run_dir, log=lambda msg: None)


def test_the_engine_loads_the_trainers_pinned_revision(model_dir, tmp_path, monkeypatch) -> None:
    """The trainer reads its base model at `model.revision` (the commit the prefetch rule pinned: an offline
    node may hold it and not `main`); the engine loads model and tokenizer at the same commit."""
    import transformers

    from trainer.rl import preflight

    llm = fake_vllm.install(monkeypatch)
    monkeypatch.setattr(preflight, "vllm_import_error", lambda: None)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    seen = []
    real = transformers.AutoModelForCausalLM.from_pretrained.__func__

    def from_pretrained(cls, *args, **kwargs):
        seen.append(kwargs.get("revision"))
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", classmethod(from_pretrained))
    trainer = make_trainer(model_dir, tmp_path / "run", revision="0123abcd", generation_backend="vllm")
    (engine,) = llm.instances  # one engine, shared by the train and eval generators
    assert seen == ["0123abcd"]
    assert engine.kwargs["revision"] == engine.kwargs["tokenizer_revision"] == "0123abcd"
    assert engine.kwargs["model"] == str(model_dir)
    trainer.close()


def test_the_trainer_puts_the_engine_to_sleep_between_rollouts_and_update(model_dir, tmp_path, monkeypatch):
    from trainer.rl import train
    from trainer.rl.rollout import HFGenerator

    order: list[str] = []
    monkeypatch.setattr(HFGenerator, "before_update", lambda self: order.append("before_update"), raising=False)
    trainer = make_trainer(model_dir, tmp_path / "run")
    real_rollout, real_update = trainer.rollout, trainer.update
    monkeypatch.setattr(trainer, "rollout", lambda step: (order.append("rollout"), real_rollout(step))[1])
    monkeypatch.setattr(trainer, "update", lambda p, rows: (order.append("update"), real_update(p, rows))[1])
    trainer.train_step(1)
    assert order[:3] == ["rollout", "before_update", "update"] and order.count("before_update") == 1
    assert train  # (imported for the module's monkeypatch targets)


def test_a_resumed_run_syncs_the_engine_before_its_first_rollout(model_dir, tmp_path, monkeypatch) -> None:
    """The engine is built (and verified at sync 0) with the starting weights, before the checkpoint loads:
    a run resumed at step 2 syncs the resumed weights into it before step 3's rollouts."""
    from trainer.rl import preflight, vllm_engine

    fake_vllm.install(monkeypatch)
    monkeypatch.setattr(preflight, "vllm_import_error", lambda: None)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    trainer = make_trainer(model_dir, tmp_path / "run", generation_backend="vllm", max_steps=4, eval_every=100)
    engine = vllm_engine._ENGINES[trainer.policies]
    assert engine.synced_step == 0
    seen = []

    def first_step(step):
        seen.append((step, engine.synced_step))
        raise KeyboardInterrupt  # the test ends the run here

    monkeypatch.setattr(trainer, "resume", lambda: 2)  # as if step-000002 had loaded
    monkeypatch.setattr(trainer, "train_step", first_step)
    with pytest.raises(KeyboardInterrupt):
        trainer.fit()
    assert seen == [(3, 2)]


def test_a_checkpoint_written_on_a_gpu_resumes_anywhere(model_dir, tmp_path, monkeypatch) -> None:
    """state.pt as a GPU rank writes it (every tensor tagged cuda:0) resumes on a CPU: loaded with a
    map_location, the optimizer moves its state to its parameters' device (torch.load without
    one would put every rank's copy on cuda:0, and fail where there is no GPU)."""
    run_dir = tmp_path / "run"
    trainer = make_trainer(model_dir, run_dir)
    trainer.train_step(1)
    with monkeypatch.context() as m:  # torch.save as on a GPU: every storage's location is cuda:0
        m.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        trainer.checkpoint(1)
    state = next(run_dir.rglob("state.pt"))
    with pytest.raises(RuntimeError, match="CUDA"):  # the file does say cuda:0
        torch.load(state, weights_only=False)
    again = make_trainer(model_dir, run_dir)
    assert again.resume() == 1
    for p, q in zip(trainer.policies, again.policies):
        saved = p.optimizer.state_dict()["state"]
        loaded = q.optimizer.state_dict()["state"]
        assert saved.keys() == loaded.keys() and saved
        for k in saved:
            assert loaded[k]["exp_avg"].device.type == "cpu"
            assert torch.equal(loaded[k]["exp_avg"], saved[k]["exp_avg"])


def test_fit_closes_the_backends_when_training_fails(model_dir, tmp_path, monkeypatch) -> None:
    from trainer.rl.rollout import HFGenerator

    closed: list[int] = []
    monkeypatch.setattr(HFGenerator, "close", lambda self: closed.append(id(self)), raising=False)
    trainer = make_trainer(model_dir, tmp_path / "run")

    def fails(step):
        raise RuntimeError("a step that fails")

    monkeypatch.setattr(trainer, "train_step", fails)
    with pytest.raises(RuntimeError, match="a step that fails"):
        trainer.fit()
    assert sorted(closed) == sorted({id(trainer.generate.inner), id(trainer.eval_generate.inner)})
