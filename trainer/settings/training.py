"""Settings of GRPO training (config.yaml's `training`): TRL's GRPOConfig names, the multi-role knobs, the
policies' LoRA adapters and the vllm rollout engine."""

from __future__ import annotations

from dataclasses import dataclass

from trainer.settings.early_warning import EarlyWarningSettings
from trainer.settings.fields import SettingsError, setting
from trainer.settings.sources import EVAL_PROBLEMS_REF, check_eval_problems

GENERATION_BACKENDS = ("hf", "vllm")  # trainer/rl/rollout.py builds each
IMPORTANCE_SAMPLING_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")  # TRL's names


def is_eval_step(step: int, eval_every: int, max_steps: int) -> bool:
    """Whether a run evaluates after `step` (0: the base model): every `eval_every` steps and at the last."""
    return step % eval_every == 0 or step == max_steps


@dataclass(frozen=True)
class LoraSettings:
    """PEFT LoraConfig fields of each policy's adapter."""

    r: int = setting(64, "LoRA rank.", ge=1)
    lora_alpha: float = setting(32, "LoRA alpha.", gt=0)
    lora_dropout: float = setting(0.0, "LoRA dropout.", ge=0, le=1)
    target_modules: str | list[str] = setting(
        "all-linear",
        "Module names, or all-linear.",
        schema={"minLength": 1, "items": {"type": "string", "minLength": 1}, "minItems": 1, "uniqueItems": True},
    )


@dataclass(frozen=True)
class VllmSettings:
    """The vllm rollout backend's engine (trainer/rl/vllm_engine.py); ignored by hf."""

    gpu_memory_utilization: float = setting(
        0.3, "Share of the GPU's memory the engine takes (weights + KV cache); the trainer needs the rest.", gt=0, le=1
    )
    max_model_len: int | None = setting(
        None, "Longest sequence the engine serves (null: the run's longest prompt + completion, rounded up).", ge=16
    )
    enforce_eager: bool = setting(False, "No CUDA graphs (faster start-up, slower decoding).")
    enable_sleep_mode: bool = setting(
        False,
        "Sleep the engine through each update (level 1: weights to CPU memory, KV cache dropped; woken before "
        "the sync; CUDA only).",
    )
    tensor_parallel_size: int = setting(
        1,
        "GPUs one engine is sharded over; preflight accepts 1 only (one engine per rank; tensor-parallel "
        "subgroups do not exist yet).",
        ge=1,
    )
    max_lora_rank: int | None = setting(
        None, "Highest adapter rank served (null: training.lora.r rounded up to a rank vLLM accepts).", ge=1
    )


def check_importance_sampling(t: TrainingSettings) -> None:
    """The importance ratio's range; top_p 1 with vllm: under top_p < 1 the engine's log-probs are
    renormalised over the nucleus (vLLM's processed_logprobs), the trainer's are not."""
    mode, lo, hi = (
        t.vllm_importance_sampling_mode,
        t.vllm_importance_sampling_clip_min,
        t.vllm_importance_sampling_clip_max,
    )
    if (lo is None and hi is None and mode.endswith("_truncate")) or (None not in (lo, hi) and lo > hi):
        raise SettingsError(f"training.vllm_importance_sampling_clip_min/_clip_max: [{lo}, {hi}] is not a range")
    if t.generation_backend == "vllm" and t.top_p != 1:
        raise SettingsError(
            f"training.top_p: {t.top_p} with generation_backend vllm: logp_mismatch and the importance "
            "ratio compare engine and trainer log-probs, defined for top_p 1 only; set top_p: 1.0"
        )


@dataclass(frozen=True)
class TrainingSettings:
    """GRPO hyperparameters under TRL's GRPOConfig names, plus the multi-role knobs. The defaults are TRL's where
    TRL has the field, but learning_rate (the study's, docs/design.md); config.yaml states the study's values."""

    finetune: str = setting(
        "lora", "lora: one adapter per policy on a frozen base; full: a model copy each.", choices=("lora", "full")
    )
    lora: LoraSettings = setting(LoraSettings(), "Each policy's LoRA adapter (PEFT LoraConfig).")
    # the study's rate (docs/design.md) for LoRA adapters; TRL's default, 1e-6, is a full fine-tune's
    learning_rate: float = setting(2e-5, "AdamW learning rate.", gt=0)
    lr_scheduler_type: str = setting(
        "linear", "Learning-rate schedule: constant, linear or cosine.", choices=("constant", "linear", "cosine")
    )
    warmup_ratio: float = setting(0.0, "Fraction of steps of linear warm-up.", ge=0, le=1)
    adam_beta1: float = setting(0.9, "AdamW beta1.", ge=0, lt=1)
    adam_beta2: float = setting(0.999, "AdamW beta2.", ge=0, lt=1)
    weight_decay: float = setting(0.0, "AdamW weight decay.", ge=0)
    max_grad_norm: float = setting(1.0, "Gradient clipping per policy.", gt=0)
    max_steps: int = setting(300, "Training steps.", ge=1)
    prompts_per_step: int = setting(64, "Distinct prompts per step.", ge=1)
    num_generations: int = setting(8, "Rollouts (episodes) per prompt: the GRPO group.", ge=2)
    num_iterations: int = setting(1, "Optimisation passes per generation batch.", ge=1)
    loss_type: str = setting(
        "dapo", "TRL's GRPO loss normalisation: grpo, dapo or dr_grpo.", choices=("grpo", "dapo", "dr_grpo")
    )
    beta: float = setting(0.0, "KL coefficient against the frozen reference.", ge=0)
    use_bias_correction_kl: bool = setting(True, "Weight the KL term by the importance ratio (TRL's default).")
    epsilon: float = setting(0.2, "Lower clip range.", gt=0)
    epsilon_high: float | None = setting(None, "Upper clip range (null: epsilon).")
    scale_rewards: str = setting(
        "group", "group: divide advantages by the group std; none: do not.", choices=("group", "none")
    )
    temperature: float = setting(1.0, "Sampling temperature in training.", gt=0)
    top_p: float = setting(1.0, "Nucleus sampling in training.", gt=0, le=1)
    max_completion_length: int | None = setting(None, "Tokens per turn (null: the task's).", ge=1)
    reward_mode: str = setting(
        "final_outcome",
        "Reward of a turn: final_outcome (the episode's, given to every role) or per_role (each role's own).",
        choices=("final_outcome", "per_role"),
    )
    advantage_grouping: str = setting(
        "role_instance",
        "GRPO groups by prompt and role instance (role_instance), or by episode.",
        choices=("role_instance", "episode"),
    )
    normalize_advantages_per_role: bool = setting(False, "Divide each role's advantages by their std over the step.")
    micro_batch_tokens: int = setting(16384, "Token budget of one training micro-batch.", ge=64)
    agent_gradients: bool = setting(
        False,
        "Record each parallel agent's gradient (voter k, worker k) in train.parquet (n_agents, agent_grad_norms, "
        "amplification_index, agent_cos_mean). Micro-batches are then split per agent, which changes the float "
        "summation order of the update; false: per-role micro-batches, no columns.",
    )
    gradient_checkpointing: bool = setting(False, "Recompute activations in backward (real scales).")
    generation_backend: str = setting(
        "hf",
        "Rollout backend: hf (Hugging Face generate, one batched call per stage and policy) or vllm (a colocated "
        "vllm.LLM serving one LoRA adapter per policy; needs the `vllm` extra).",
        choices=GENERATION_BACKENDS,
    )
    vllm: VllmSettings = setting(VllmSettings(), "The vllm backend's engine (ignored by hf).")
    vllm_importance_sampling_correction: bool = setting(  # TRL's default is on; off keeps earlier vllm runs as run
        False,
        "vllm backend: weight each token's loss by TRL's importance ratio exp(trainer log p - engine log p), "
        "truncated or masked (train.parquet's importance_sampling_ratio_*); ignored by hf (on-policy). "
        "TRL's default is true.",
    )
    vllm_importance_sampling_mode: str = setting(
        "sequence_mask",
        "TRL's names and default: token_truncate, token_mask (per token), sequence_truncate, sequence_mask (one "
        "ratio per sequence); truncate clamps to [clip_min, clip_max], mask zeroes ratios outside it.",
        choices=IMPORTANCE_SAMPLING_MODES,
    )
    vllm_importance_sampling_clip_max: float | None = setting(
        3.0, "Upper bound C_max of the importance ratio (null: none).", gt=0
    )
    vllm_importance_sampling_clip_min: float | None = setting(
        None, "Lower bound C_min of the importance ratio (null: none).", ge=0
    )
    on_warning: str = setting(
        "log",
        "What an early warning does (trainer/early_warning.py): log (warnings.parquet and the progress log) "
        "or stop (checkpoint and end the run as done-early, named in done.json's stopped_early).",
        choices=("log", "stop"),
    )
    early_warning: EarlyWarningSettings = setting(EarlyWarningSettings(), "The early-warning detectors' thresholds.")
    generation_memory_gb: float | None = setting(
        None,
        "KV-cache budget (GiB) of one Hugging Face generate chunk: a stage is split into chunks of prompts "
        "(sorted by length) that fit it, estimated from the model config. null: half the GPU's free memory "
        "at the call, 2 GiB on CPU.",
        gt=0,
    )
    eval_every: int = setting(10, "Steps between evals (and one at step 0 and at the last).", ge=1)
    save_every: int = setting(10, "Steps between checkpoints.", ge=1)
    keep_last: int = setting(2, "Checkpoints kept.", ge=1)
    eval_temperature: float = setting(0.7, "Sampling temperature in eval (0 is greedy).", ge=0)
    eval_problems: int | str = setting(
        500,
        "Problems per eval split, at most (an integer), or `all`; a split's own eval_problems replaces it.",
        schema=EVAL_PROBLEMS_REF,
    )
    eval_samples: int = setting(
        1,
        "Episodes per eval problem (k), sampled at eval_temperature (above 0 when k > 1): eval.parquet's "
        "accuracy is their mean, pass_at_k the share of problems with a correct one, accuracy_std the spread "
        "of the k per-sample accuracies; 1: one episode per problem.",
        ge=1,
    )
    eval_chunk_problems: int = setting(
        256,
        "Problems per eval chunk (each split runs in chunks, each with a seed of its own): each finished chunk "
        "is saved under work/eval_progress/, so a job requeued in the middle of an eval resumes it there. A "
        "split of at most this many problems is one chunk.",
        ge=1,
    )
    samples_per_eval: int = setting(16, "Episodes kept in samples.parquet per eval.", ge=0)
    enable_thinking: bool = setting(False, "Qwen3 thinking mode in the chat template.")
    max_skipped: int = setting(10, "Steps with a non-finite loss or gradient tolerated before the run fails.", ge=0)
    policy_groups: dict[str, list[str]] | None = setting(
        None,
        "A custom routing (policy name -> its roles, every role of the workflow once), e.g. voters and "
        "aggregator on one policy; null: the run's policy mode (shared or isolated).",
        schema={
            "additionalProperties": {"type": "array", "items": {"type": "string"}, "minItems": 1, "uniqueItems": True}
        },
    )

    def __post_init__(self) -> None:
        if self.epsilon_high is not None and self.epsilon_high < self.epsilon:
            raise SettingsError(
                f"training.epsilon_high ({self.epsilon_high}) is below training.epsilon "
                f"({self.epsilon}): raise it, or set it to null to use epsilon"
            )
        check_eval_problems(self.eval_problems, "training.eval_problems")
        check_importance_sampling(self)
        for key in ("eval_samples", "eval_chunk_problems"):
            if getattr(self, key) < 1:
                raise SettingsError(f"training.{key}: {getattr(self, key)} is below 1")
        if self.eval_samples > 1 and self.eval_temperature == 0:
            # greedy decoding gives the same episode k times: pass@k would be accuracy, the spread zero
            raise SettingsError(
                f"training.eval_samples: {self.eval_samples} samples per eval problem need sampling, "
                f"but training.eval_temperature is 0 (greedy: every sample the same); set "
                f"eval_temperature above 0, or eval_samples: 1"
            )

    @property
    def clip_high(self) -> float:
        """The upper clip range: epsilon_high, or epsilon where unset."""
        return self.epsilon_high if self.epsilon_high is not None else self.epsilon

    def is_eval_step(self, step: int) -> bool:
        """Whether a run evaluates after `step` (see `is_eval_step`)."""
        return is_eval_step(step, self.eval_every, self.max_steps)
