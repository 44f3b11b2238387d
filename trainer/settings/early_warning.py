"""Settings of the early-warning detectors (config.yaml's `training.early_warning`)."""

from __future__ import annotations

from dataclasses import dataclass

from trainer.contract.rundir import EARLY_WARNING_DETECTORS
from trainer.settings.fields import setting

SINGLE_DETECTORS = [d for d in EARLY_WARNING_DETECTORS if d != "combined"]  # what `combine` may count


@dataclass(frozen=True)
class EarlyWarningSettings:
    """Thresholds of the early-warning detectors (trainer/early_warning.py)."""

    window: int = setting(3, "Steps in a signal's trailing mean and in the gradient norm's running baseline.", ge=1)
    baseline_steps: int = setting(3, "First steps whose mean entropy is a role's entropy baseline.", ge=1)
    entropy_ratio: float = setting(
        0.3, "Entropy collapse: trailing entropy at or below this fraction of the baseline.", gt=0, le=1
    )
    zero_var_group_share: float = setting(
        0.9, "Advantage collapse: at or above this share of GRPO groups with zero reward variance.", gt=0, le=1
    )
    grad_spike_ratio: float = setting(
        5.0, "Gradient-norm spike: a role's norm at or above this many times its running median.", ge=0
    )
    capture_share: float = setting(
        0.6, "Capture: a role's share of a shared policy's squared gradient at or above this.", gt=0, le=1
    )
    amplification_index: float = setting(
        2.0, "Amplification: sum_k ||g_k|| / ||sum_k g_k|| of a role's parallel agents at or above this.", ge=1
    )
    train_inference_mismatch: float = setting(
        0.5, "Mismatch: mean |log p_engine - log p_trainer| (logp_mismatch, vllm) at or above this.", ge=0
    )
    length_surge_ratio: float = setting(1.5, "Length surge: trailing completion length over its running minimum.", ge=1)
    entropy_reward_gap: float = setting(
        0.5, "Entropy-reward: relative entropy drop from the baseline minus the reward's rise from it."
    )
    reward_drop: float = setting(
        0.3, "Reward drop: the highest trailing reward so far minus the trailing reward.", ge=0
    )
    clip_ratio: float = setting(
        0.2, "Clip ratio: share of tokens whose importance ratio left the clip range.", ge=0, le=1
    )
    kl: float = setting(0.5, "KL: per-token KL to the reference policy (where beta > 0).", ge=0)
    combine: list[str] = setting(
        ["entropy_collapse", "grad_norm_spike", "length_surge", "entropy_reward", "reward_drop"],
        "Combined: the detectors it counts.",
        schema={"items": {"type": "string", "enum": SINGLE_DETECTORS}, "uniqueItems": True},
    )
    combine_k: int = setting(
        2, "Combined: fires when this many of `combine` fired in the last combine_window steps.", ge=1
    )
    combine_window: int = setting(5, "Combined: steps in which its detectors' firing counts.", ge=1)
