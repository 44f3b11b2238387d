"""GRPO as TRL computes it: per-token log-probs, the clipped surrogate, KL, and loss normalisation.

Pure tensor functions, unit-tested against TRL's GRPOTrainer, and the rewards and advantages of a
step's turns (`assign_rewards_and_advantages`) that the loss consumes. A loss variant is one entry of
LOSS_AGGREGATIONS, keyed by TRL's `loss_type`; it returns this micro-batch's share of the whole
batch's loss, so summing micro-batch losses (and their gradients) gives the full-batch result.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from trl.trainer.utils import entropy_from_logits, selective_log_softmax

from trainer.settings import TrainingSettings

if TYPE_CHECKING:  # types only: the workflows import nothing from here
    from trainer.workflows import Episode, Turn, Workflow


def per_token_logps(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    n_completion: int,
    temperature: float,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropies) of the last `n_completion` tokens, logits scaled by the sampling temperature."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=n_completion + 1).logits
    return _logps_and_entropy(logits[:, :-1, :], input_ids[:, -n_completion:], temperature, with_entropy)


def per_token_logps_shared_prompts(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    prompt_of: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_attention: torch.Tensor,
    temperature: float,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """per_token_logps of rows whose prompts repeat (a group's generations, a stage's voters).

    Each distinct prompt (left-padded `prompt_ids`, U x P) runs once; its KV cache is indexed per
    row (`prompt_of`, R) and the rows' completions (right-padded, R x C) run on it, gradients
    flowing back through the index into the shared pass. The positions and masks are those of
    per_token_logps on the collated rows, so the values are the same up to float rounding.
    """
    head = model(input_ids=prompt_ids, attention_mask=prompt_mask, use_cache=True, logits_to_keep=1)
    cache = head.past_key_values
    cache.reorder_cache(prompt_of)
    mask = torch.cat([prompt_mask[prompt_of], completion_attention], dim=1)
    rest = model(input_ids=completion_ids, attention_mask=mask, past_key_values=cache, use_cache=True).logits
    logits = torch.cat([head.logits[prompt_of], rest[:, :-1, :]], dim=1)  # the logits that predict each token
    return _logps_and_entropy(logits, completion_ids, temperature, with_entropy)


def _logps_and_entropy(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of `tokens` under `logits` (B x T x V, each position predicting its token) scaled by
    the temperature, and the entropies when asked."""
    logits = logits.float() / temperature
    logps = selective_log_softmax(logits, tokens)
    entropy = entropy_from_logits(logits.detach()) if with_entropy else None
    return logps, entropy


@dataclass
class TokenLoss:
    """Per-token loss terms of one micro-batch."""

    loss: torch.Tensor  # (B, T)
    kl: torch.Tensor | None  # (B, T)
    clipped: torch.Tensor  # (B, T) bool: the ratio left the clip range where it matters (TRL's clip_ratio)


def grpo_token_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    epsilon_low: float,
    epsilon_high: float,
    beta: float = 0.0,
    ref_logps: torch.Tensor | None = None,
    use_bias_correction_kl: bool = True,
) -> TokenLoss:
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


IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def vllm_importance_sampling_ratio(
    old_logps: torch.Tensor,
    sampling_logps: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    clip_min: float | None,
    clip_max: float | None,
) -> torch.Tensor:
    """TRL's `vllm_importance_sampling_correction` weight (GRPOTrainer._generate_and_score_completions):
    exp(trainer log p - engine log p) per token (`token_*`, B x T) or summed over the sequence
    (`sequence_*`, B x 1), clamped to [clip_min, clip_max] (`*_truncate`) or set to 0 outside it
    (`*_mask`). A NaN engine log-prob gives a zero difference (ratio 1), as in TRL. No gradient."""
    diff = torch.nan_to_num((old_logps.detach() - sampling_logps) * mask, nan=0.0)
    if mode.startswith("sequence_"):
        diff = diff.sum(dim=-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode.endswith("_truncate"):
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    if mode.endswith("_mask"):
        lo = clip_min if clip_min is not None else -math.inf
        hi = clip_max if clip_max is not None else math.inf
        return ratio.masked_fill((ratio < lo) | (ratio > hi), 0.0)
    raise ValueError(f"training.vllm_importance_sampling_mode: {mode!r} is not one of {', '.join(IS_MODES)}")


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


def assign_rewards_and_advantages(
    workflow: Workflow, episodes: list[Episode], group_of: list[int], training: TrainingSettings
) -> None:
    """Set every turn's reward (final outcome or per role) and its GRPO advantage."""
    for ep in episodes:
        for t in ep.turns:
            t.reward = ep.score.score if training.reward_mode == "final_outcome" else workflow.role_reward(ep, t)
    scale = training.scale_rewards == "group"
    if training.advantage_grouping == "episode":
        rewards = [sum(t.reward for t in ep.turns) / len(ep.turns) for ep in episodes]
        advs = group_advantages(rewards, group_of, scale)
        for ep, a in zip(episodes, advs):
            for t in ep.turns:
                t.advantage = a
    else:  # a group per prompt and role instance, across the rollouts; every turn a sample
        turns = [(g, t) for g, ep in zip(group_of, episodes) for t in ep.turns]
        advs = group_advantages([t.reward for _, t in turns], [(g, t.role, t.agent) for g, t in turns], scale)
        for (_, t), a in zip(turns, advs):
            t.advantage = a
    if training.normalize_advantages_per_role:
        normalize_per_role([t for ep in episodes for t in ep.turns])


def normalize_per_role(turns: list[Turn]) -> None:
    """Divide each role's advantages by their std over the step (Bessel, +1e-4, as the group std), so
    that every role's advantages have the same scale whatever its reward variance. Not re-centred:
    each GRPO group keeps its zero mean, each turn its sign."""
    for role in dict.fromkeys(t.role for t in turns):
        mine = [t for t in turns if t.role == role]
        if len(mine) < 2:
            continue
        std = float(torch.tensor([t.advantage for t in mine], dtype=torch.float64).std())
        for t in mine:
            t.advantage = t.advantage / (std + 1e-4)
