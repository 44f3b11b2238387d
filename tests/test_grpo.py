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
