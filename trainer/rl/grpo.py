"""GRPO as TRL computes it: per-token log-probs, the clipped surrogate, KL, and loss normalisation.

Pure tensor functions, unit-tested against TRL's GRPOTrainer. A loss variant is one entry of
LOSS_AGGREGATIONS, keyed by TRL's `loss_type`; it returns this micro-batch's share of the whole
batch's loss, so summing micro-batch losses (and their gradients) gives the full-batch result.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Hashable

import torch
from trl.trainer.utils import entropy_from_logits, selective_log_softmax


def per_token_logps(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    n_completion: int, temperature: float, with_entropy: bool = False
                    ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropies) of the last `n_completion` tokens, logits scaled by the sampling temperature."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    logits = logits[:, -n_completion - 1:-1, :].float() / temperature
    logps = selective_log_softmax(logits, input_ids[:, -n_completion:])
    entropy = entropy_from_logits(logits.detach()) if with_entropy else None
    return logps, entropy


@dataclass
class TokenLoss:
    """Per-token loss terms of one micro-batch."""

    loss: torch.Tensor  # (B, T)
    kl: torch.Tensor | None  # (B, T)
    clipped: torch.Tensor  # (B, T) bool: the ratio left the clip range where it matters (TRL's clip_ratio)


def grpo_token_loss(logps: torch.Tensor, old_logps: torch.Tensor, advantages: torch.Tensor,
                    epsilon_low: float, epsilon_high: float, beta: float = 0.0,
                    ref_logps: torch.Tensor | None = None, use_bias_correction_kl: bool = True) -> TokenLoss:
    """TRL's token-level clipped surrogate `-min(r A, clip(r) A)` plus `beta * KL(k3)`.

    With `use_bias_correction_kl` (TRL's default) the KL is weighted by the importance ratio r,
    kept in the graph: on-policy r = 1, but its gradient still reaches the KL term.
    """
    advantages = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
    coef_1 = torch.exp(logps - old_logps)
    coef_2 = torch.clamp(coef_1, 1 - epsilon_low, 1 + epsilon_high)
    loss1, loss2 = coef_1 * advantages, coef_2 * advantages
    loss = -torch.min(loss1, loss2)
    kl = None
    if beta != 0.0:
        if ref_logps is None:
            raise ValueError("beta > 0 needs reference log-probs")
        kl = torch.exp(ref_logps - logps) - (ref_logps - logps) - 1
        if use_bias_correction_kl:
            kl = kl * coef_1
        loss = loss + beta * kl
    clipped = ((coef_1 < 1 - epsilon_low) & (advantages < 0)) | ((coef_1 > 1 + epsilon_high) & (advantages > 0))
    return TokenLoss(loss=loss, kl=kl, clipped=clipped)


@dataclass
class BatchTotals:
    """Sizes of a policy's whole batch, which the loss normalisers divide by."""

    n_sequences: int
    n_tokens: int
    max_completion_length: int


def _grpo(per_token: torch.Tensor, mask: torch.Tensor, totals: BatchTotals) -> torch.Tensor:
    """Mean over sequences of each sequence's token mean."""
    return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).sum() / totals.n_sequences


def _dapo(per_token: torch.Tensor, mask: torch.Tensor, totals: BatchTotals) -> torch.Tensor:
    """Mean over every completion token of the batch."""
    return (per_token * mask).sum() / max(totals.n_tokens, 1)


def _dr_grpo(per_token: torch.Tensor, mask: torch.Tensor, totals: BatchTotals) -> torch.Tensor:
    """Sum over tokens divided by sequences x max_completion_length (no length bias)."""
    return (per_token * mask).sum() / (totals.n_sequences * totals.max_completion_length)


LOSS_AGGREGATIONS: dict[str, Callable[[torch.Tensor, torch.Tensor, BatchTotals], torch.Tensor]] = {
    "grpo": _grpo,
    "dapo": _dapo,
    "dr_grpo": _dr_grpo,
}


def group_advantages(rewards: list[float], groups: list[Hashable], scale: bool) -> list[float]:
    """GRPO advantages: reward minus its group's mean, divided by the group's std (+1e-4) when `scale`.

    The std is Bessel-corrected, as TRL's; a group of one gets advantage 0.
    """
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    out = [0.0] * len(rewards)
    for idx in members.values():
        r = torch.tensor([rewards[i] for i in idx], dtype=torch.float64)
        if len(idx) < 2:
            continue
        adv = r - r.mean()
        if scale:
            adv = adv / (r.std() + 1e-4)
        for i, a in zip(idx, adv.tolist()):
            out[i] = a
    return out
