"""TRL's vLLM importance-sampling correction: engine and trainer sample from
different models (a bf16 engine, the trainer's own kernels), so each token's loss is weighted by
exp(trainer log p - engine log p), truncated or masked (`vllm_importance_sampling_correction`,
`_mode`, `_clip_max`, `_clip_min`: TRL's names, and TRL's defaults but for the switch, off here).

- the ratio equals TRL's formula (GRPOTrainer._generate_and_score_completions, reproduced below as
  TRL 1.16 writes it) and hand-made numbers in every mode;
- the update multiplies each token's loss by it (twice the loss at ratio 2, the cap at ratio 5), logs
  its mean, min and max per role, and is a no-op with the hf backend (its rollouts are on-policy);
- a train step of a vllm run writes the ratio into train.parquet's columns;
- top_p < 1 is refused with the vllm backend: the engine's log-probs are then the nucleus's.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from tests.test_routing import PAD, rows_for, tiny_qwen3, training
from trainer.rl.grpo import IS_MODES, vllm_importance_sampling_ratio
from trainer.rl.policies import PolicySet
from trainer.rl.update import IS_COLUMNS, PolicyUpdater, Row
from trainer.settings import SettingsError, TrainingSettings, from_dict

LN2, LN4, LN5 = math.log(2), math.log(4), math.log(5)
OLD = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.2, 0.0]])
SAMPLING = OLD - torch.tensor([[LN2, -LN2, LN5], [LN4, 0.0, 7.0]])  # the last token is padding (masked)
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
HAND = {  # clip_max 3, clip_min None (TRL's defaults); sequence ratios: 2 x 0.5 x 5 = 5 and 4 x 1 = 4
    "token_truncate": [[2.0, 0.5, 3.0], [3.0, 1.0, 1.0]],
    "token_mask": [[2.0, 0.5, 0.0], [0.0, 1.0, 1.0]],
    "sequence_truncate": [[3.0], [3.0]],
    "sequence_mask": [[0.0], [0.0]],
}


def trl_ratio(old_per_token_logps, sampling_per_token_logps, mask, mode, clip_min, clip_max):
    """TRL 1.16's lines (grpo_trainer.py, `if self.use_vllm and self.vllm_importance_sampling_correction`)."""
    per_token_logps_diff = (old_per_token_logps - sampling_per_token_logps) * mask
    per_token_logps_diff = torch.nan_to_num(per_token_logps_diff, nan=0.0)
    if mode in ["sequence_mask", "sequence_truncate"]:
        logps_diff = per_token_logps_diff.sum(dim=-1, keepdim=True)
    else:
        logps_diff = per_token_logps_diff
    ratio = torch.exp(logps_diff)
    if mode in ["sequence_truncate", "token_truncate"]:
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    min_val = clip_min if clip_min is not None else -math.inf
    max_val = clip_max if clip_max is not None else math.inf
    return ratio.masked_fill((ratio < min_val) | (ratio > max_val), value=0.0)


@pytest.mark.parametrize("mode", IS_MODES)
def test_the_ratio_is_trls_on_hand_made_numbers(mode):
    got = vllm_importance_sampling_ratio(OLD, SAMPLING, MASK, mode, None, 3.0)
    assert torch.allclose(got, torch.tensor(HAND[mode]), atol=1e-6)
    for lo, hi in ((None, 3.0), (0.6, 3.0), (0.6, None), (0.25, 4.5)):
        assert torch.equal(
            vllm_importance_sampling_ratio(OLD, SAMPLING, MASK, mode, lo, hi),
            trl_ratio(OLD, SAMPLING, MASK, mode, lo, hi),
        ), (lo, hi)
    nan = SAMPLING.clone()
    nan[0, 1] = float("nan")  # an unavailable engine log-prob: ratio 1 there, as TRL
    assert torch.equal(
        vllm_importance_sampling_ratio(OLD, nan, MASK, mode, None, 3.0), trl_ratio(OLD, nan, MASK, mode, None, 3.0)
    )


def update_stats(backend: str, shift: float | None, **extra) -> dict[str, dict[str, float]]:
    """One update of a tiny LoRA policy (loss dapo, token_truncate) on rows whose engine log-probs are
    the trainer's own minus `shift` (so the ratio is exp(shift)); None: no engine log-probs."""
    t = from_dict(
        TrainingSettings,
        training(
            "lora",
            generation_backend=backend,
            loss_type="dapo",
            vllm_importance_sampling_correction=True,
            vllm_importance_sampling_mode="token_truncate",
            **extra,
        ),
        "training",
    )
    torch.manual_seed(0)
    policies = PolicySet(tiny_qwen3(0), {"generator": "shared"}, t)
    with torch.no_grad():
        for x in policies.policies["shared"].params:
            x.add_(0.05 * torch.randn_like(x))
    updater = PolicyUpdater(policies, t, pad_id=PAD, device="cpu")
    rows = rows_for(["generator"], per_role=4)
    model = policies.model("shared")
    if shift is not None:
        for r in rows:
            with torch.no_grad():
                own = updater.logps(model, [r])[0][0]
            r.engine_logps = (own - shift).tolist()
    return updater.update(policies.policies["shared"], rows)


def test_the_update_weights_each_tokens_loss_by_the_ratio_and_logs_it():
    plain = update_stats("vllm", None)["generator"]  # no engine log-probs: no correction
    assert not set(IS_COLUMNS) & set(plain)
    doubled = update_stats("vllm", LN2)["generator"]
    assert doubled["loss"] == pytest.approx(2 * plain["loss"], rel=1e-4)
    for key, value in zip(IS_COLUMNS, (2.0, 2.0, 2.0)):
        assert doubled[key] == pytest.approx(value, rel=1e-4), key
    capped = update_stats("vllm", LN5)["generator"]  # ratio 5, truncated at clip_max 3
    assert capped["loss"] == pytest.approx(3 * plain["loss"], rel=1e-4)
    assert capped["importance_sampling_ratio_max"] == pytest.approx(3.0)
    hf = update_stats("hf", LN5)["generator"]  # the hf backend samples on-policy: no correction
    assert hf["loss"] == pytest.approx(plain["loss"], rel=1e-6) and not set(IS_COLUMNS) & set(hf)


def test_engine_log_probs_must_cover_the_completion():
    t = from_dict(
        TrainingSettings,
        training("lora", generation_backend="vllm", vllm_importance_sampling_correction=True),
        "training",
    )
    policies = PolicySet(tiny_qwen3(0), {"generator": "shared"}, t)
    rows = [Row("generator", [3, 4], [5, 6, 7], 1.0, 1.0, engine_logps=[-1.0, -1.0])]
    with pytest.raises(ValueError, match="role generator: 2 engine log-probs for 3 completion tokens"):
        PolicyUpdater(policies, t, pad_id=PAD, device="cpu").update(policies.policies["shared"], rows)


def test_top_p_below_one_is_refused_with_the_vllm_backend():
    with pytest.raises(SettingsError, match=r"training.top_p: 0.9 with generation_backend vllm"):
        from_dict(TrainingSettings, {"generation_backend": "vllm", "top_p": 0.9}, "training")
    from_dict(TrainingSettings, {"generation_backend": "hf", "top_p": 0.9}, "training")  # hf: its own log-probs
    with pytest.raises(SettingsError, match="vllm_importance_sampling_mode: 'token'"):
        from_dict(TrainingSettings, {"vllm_importance_sampling_mode": "token"}, "training")


def test_a_vllm_train_step_writes_the_ratio_into_train_parquet(tmp_path, monkeypatch):
    """A train step of a vllm run whose engine (HF generate standing in for vLLM, which is not installed
    here) returns log-probs 2x less likely than the trainer's: ratio 2 in every role's columns."""
    from tests.local_qwen3 import real_scale_config, save_random_qwen3, small_vocab_tokenizer
    from trainer.rl import rollout, train
    from trainer.rl.weight_sync import completion_logps

    class EngineLike(rollout.HFGenerator):
        def __init__(self, policies, tokenizer, training=None, seed=0, **kwargs):
            keep = ("max_new_tokens", "temperature", "top_p", "enable_thinking", "device", "generation_memory_gb")
            super().__init__(policies, tokenizer, **{k: v for k, v in kwargs.items() if k in keep})

        def __call__(self, role, prompts):
            out = super().__call__(role, prompts)
            model = self.policies.model(self.policies.routing[role])
            logps = completion_logps(
                model, [c.prompt_ids for c in out], [c.completion_ids or [0] for c in out], self.temperature
            )
            for c, lp in zip(out, logps):
                c.logprobs = (lp - LN2).tolist()[: len(c.completion_ids)]
            return out

    monkeypatch.setitem(rollout.BUILDERS, "vllm", EngineLike)
    monkeypatch.setattr(train, "check_run", lambda cfg: None)  # preflight: vllm is not installed here
    model_dir = save_random_qwen3(tmp_path / "model", small_vocab_tokenizer(), hidden_size=32, num_hidden_layers=1)
    cfg = real_scale_config(
        model_dir,
        "voting-math-qwen3-0.6b-isolated-s0",
        tmp_path / "run",
        training={
            "generation_backend": "vllm",
            "vllm_importance_sampling_correction": True,
            "vllm_importance_sampling_mode": "token_truncate",
            "max_completion_length": 4,
            "prompts_per_step": 1,
            "num_generations": 2,
            "gradient_checkpointing": False,
        },
    )
    trainer = train.Trainer(cfg, tmp_path / "run")
    trainer.train_step(1)
    trainer.write_logs(tmp_path)
    logged = pd.read_parquet(tmp_path / "train.parquet")
    assert set(IS_COLUMNS) <= set(logged.columns)
    for key in IS_COLUMNS:
        assert logged[key].to_numpy() == pytest.approx(2.0, rel=1e-3), key
    assert logged["logp_mismatch"].to_numpy() == pytest.approx(LN2, abs=1e-3)
