"""train.parquet's rows of one training step: one per role, with its rollouts' rewards and lengths, its
update's statistics (update.py) and the signals the early warnings read (the columns: trainer/contract/rundir.py)."""

from __future__ import annotations

from typing import Any

import torch

from trainer.rl.agent_gradients import agent_columns
from trainer.rl.update import IS_COLUMNS
from trainer.workflows import Turn

NAN = float("nan")


def role_row(
    step: int,
    role: str,
    policy: str,
    turns: list[Turn],
    stats: dict[str, Any],
    signals: dict[str, float],
    agent_gradients: bool,
) -> dict[str, Any]:
    """The row of `role` (trained as `policy`) at `step`: `turns` are its turns of the step, `stats` its update's
    sums (loss, grad_norm, entropy, kl, clipped ... over `tokens`), `signals` the step's further columns (lr,
    time_s, logp_mismatch, zero_var_group_share); `agent_gradients`: add the per-agent gradient columns."""
    rewards = torch.tensor([t.reward for t in turns], dtype=torch.float64)
    tokens = stats.get("tokens", 0.0) or NAN
    lengths = [len(t.completion.completion_ids) for t in turns]
    return {
        "step": step,
        "role": role,
        "policy": policy,
        "n_turns": len(turns),
        "n_tokens": int(sum(lengths)),
        "reward_mean": float(rewards.mean()) if turns else NAN,
        "reward_std": float(rewards.std()) if len(turns) > 1 else NAN,
        "adv_abs_mean": sum(abs(t.advantage) for t in turns) / len(turns) if turns else NAN,
        "loss": stats.get("loss", NAN),
        "grad_norm": stats.get("grad_norm", NAN),
        "grad_sq_share": stats.get("grad_sq_share", NAN),
        "grad_cos_others": stats.get("grad_cos_others", NAN),
        "entropy": stats.get("entropy", NAN) / tokens,
        "kl": stats.get("kl", NAN) / tokens,
        "clip_ratio": stats.get("clipped", NAN) / tokens,
        "completion_len_mean": sum(lengths) / max(len(turns), 1),
        "lr": signals["lr"],
        "skipped": bool(stats.get("skipped", False)),
        "time_s": signals["time_s"],
        "logp_mismatch": signals.get("logp_mismatch", NAN),
        "zero_var_group_share": signals.get("zero_var_group_share", NAN),
        **{k: stats[k] for k in IS_COLUMNS if k in stats},  # vllm_importance_sampling_correction's ratio
        **(agent_columns(stats) if agent_gradients else {}),  # per-agent gradients (voters, workers)
    }
