"""GRPO helpers: advantages, loss aggregation, and per-role gradient attribution."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.rl.grpo import LOSS_AGGREGATIONS, BatchTotals, group_advantages, grpo_token_loss
from trainer.rl.update import GradientRecorder, Row, micro_batches


def test_group_advantages_match_trl_formula():
    adv = group_advantages([1.0, 0.0, 0.0, 1.0, 1.0, 1.0], ["a", "a", "a", "b", "b", "c"], scale=True)
    r = torch.tensor([1.0, 0.0, 0.0])
    expected = ((r - r.mean()) / (r.std() + 1e-4)).tolist()
    assert adv[:3] == pytest.approx(expected)
    assert adv[3:] == [0.0, 0.0, 0.0]  # no variance in b; c is a group of one


def test_micro_batch_losses_sum_to_the_full_batch_loss():
    torch.manual_seed(0)
    logps = torch.randn(6, 5)
    mask = (torch.rand(6, 5) > 0.3).float()
    adv = torch.randn(6)
    token = grpo_token_loss(logps, logps.detach() + 0.05 * torch.randn(6, 5), adv, 0.2, 0.28)
    totals = BatchTotals(n_sequences=6, n_tokens=int(mask.sum()), max_completion_length=5)
    for name, agg in LOSS_AGGREGATIONS.items():
        full = agg(token.loss, mask, totals)
        parts = agg(token.loss[:2], mask[:2], totals) + agg(token.loss[2:], mask[2:], totals)
        assert float(parts) == pytest.approx(float(full), abs=1e-6), name


def test_role_gradients_equal_separate_backward_passes():
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(4, 3))
    x = {"a": torch.randn(5, 4), "b": torch.randn(2, 4)}
    rec = GradientRecorder([w])
    for role in ("a", "b"):
        rec.role = role
        (x[role] @ w).pow(2).sum().backward()
    m = rec.metrics()
    for role in ("a", "b"):
        w2 = w.detach().clone().requires_grad_(True)
        (x[role] @ w2).pow(2).sum().backward()
        assert m[role]["grad_norm"] == pytest.approx(float(w2.grad.norm()), rel=1e-5)
    assert m["a"]["grad_sq_share"] + m["b"]["grad_sq_share"] == pytest.approx(1.0)
    assert torch.allclose(w.grad, sum(g[0] for g in rec.grads.values()))
    assert not math.isnan(m["a"]["grad_cos_others"])


def test_micro_batches_hold_one_role_within_budget():
    rows = [Row("g", [1] * 10, [2] * 10, 0.0, 0.0) for _ in range(5)] + [Row("e", [1] * 5, [2] * 5, 0.0, 0.0)]
    batches = micro_batches(rows, token_budget=45)
    assert all(len({r.role for r in b}) == 1 for b in batches)
    assert all(len(b) * max(len(r.prompt_ids) + len(r.completion_ids) for r in b) <= 45 for b in batches)
    assert sum(map(len, batches)) == 6


def test_rows_sharing_prompts_give_the_full_forwards_logps_entropies_and_gradients():
    """A micro-batch whose rows repeat prompts runs each distinct prompt once (collate_shared_prompts,
    per_token_logps_shared_prompts): the log-probs, entropies and LoRA gradients of a loss on them
    equal those of every row's full forward (per_token_logps on collate)."""
    import random

    from peft import LoraConfig, get_peft_model

    from tests.test_routing import ARCH, PAD, VOCAB
    from trainer.models.base_model import build_tiny_model
    from trainer.rl.grpo import per_token_logps, per_token_logps_shared_prompts
    from trainer.rl.update import collate, collate_shared_prompts

    model = get_peft_model(
        build_tiny_model(ARCH, 0, vocab_size=VOCAB, eos_token_id=1, pad_token_id=PAD),
        LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"),
    )
    params = [p for p in model.parameters() if p.requires_grad]
    with torch.no_grad():
        for p in params:  # lora_B starts at zero: perturb so every adapter weight gets a gradient
            p.add_(0.05 * torch.randn_like(p))
    model.train()
    rng = random.Random(0)
    prompts = [[rng.randrange(2, VOCAB) for _ in range(n)] for n in (3, 7, 5)]
    rows = [
        Row("g", prompts[i % 3], [rng.randrange(2, VOCAB) for _ in range(rng.randint(1, 6))], rng.uniform(-1, 1), 0.0)
        for i in range(10)
    ]
    weights = torch.randn(10, 6)

    def forward(shared: bool):
        if shared:
            *tensors, cmask = collate_shared_prompts(rows, PAD)
            assert tensors[0].shape[0] == 3 and tensors[2].tolist() == [i % 3 for i in range(10)]
            logps, entropy = per_token_logps_shared_prompts(model, *tensors, 0.7, True)
        else:
            ids, attn, cmask = collate(rows, PAD)
            logps, entropy = per_token_logps(model, ids, attn, cmask.shape[1], 0.7, True)
        grads = torch.autograd.grad((logps * cmask * weights[:, : cmask.shape[1]]).sum(), params)
        return logps * cmask, entropy * cmask, torch.cat([g.flatten() for g in grads])

    full, shared = forward(False), forward(True)
    for a, b in zip(full, shared):
        assert a.shape == b.shape
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4), float((a - b).abs().max())
    assert float(full[2].norm()) > 0
