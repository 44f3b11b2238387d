"""Typed settings of one run: the one home of every default and of the checks across fields.

A run's config.json (written by `trainer launch`, layout unchanged so that its `config_hash`
stays the same) is read into `RunSettings.from_dict`; code reads typed fields, never
`.get(key, default)` on a dict. `training` carries TRL's `GRPOConfig` field names. A key
unknown to a dataclass is an error naming its key path. rules/config.schema.yaml holds the
constraints the user's config is validated against at startup; tests/test_config_schema.py checks
that the schema and these dataclasses name the same keys, so the two cannot drift.

To add a setting: one field here (with its default and `help`), one line in the schema (type and
description), and its study value in config.yaml.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from trainer.contract.peak import SMOOTHING_WINDOW
from trainer.setting_fields import SettingsError, default_of, from_dict, setting  # noqa: F401 (callers import them from here)


def is_eval_step(step: int, eval_every: int, max_steps: int) -> bool:
    """Whether a run evaluates after `step` (0: the base model): every `eval_every` steps and at the last."""
    return step % eval_every == 0 or step == max_steps


@dataclass(frozen=True)
class LoraSettings:
    """PEFT LoraConfig fields of each policy's adapter."""

    r: int = setting(64, "LoRA rank.")
    lora_alpha: float = setting(32, "LoRA alpha.")
    lora_dropout: float = setting(0.0, "LoRA dropout.")
    target_modules: str | list[str] = setting("all-linear", "Module names, or all-linear.")


@dataclass(frozen=True)
class EarlyWarningSettings:
    """Thresholds of the early-warning detectors (trainer/rl/early_warning.py)."""

    window: int = setting(3, "Steps in a signal's trailing mean and in the gradient norm's running baseline.")
    baseline_steps: int = setting(3, "First steps whose mean entropy is a role's entropy baseline.")
    entropy_ratio: float = setting(0.3, "Entropy collapse: trailing entropy at or below this fraction of the baseline.")
    zero_var_group_share: float = setting(
        0.9, "Advantage collapse: this share of GRPO groups with zero reward variance."
    )
    grad_spike_ratio: float = setting(5.0, "Gradient-norm spike: a role's norm this many times its running median.")
    capture_share: float = setting(0.6, "Capture: a role's share of a shared policy's squared gradient.")
    amplification_index: float = setting(2.0, "Amplification: sum_k ||g_k|| / ||sum_k g_k|| of parallel agents.")
    train_inference_mismatch: float = setting(0.5, "Mean |log p_engine - log p_trainer| (logp_mismatch, vllm).")
    length_surge_ratio: float = setting(1.5, "Length surge: trailing completion length over its running minimum.")
    entropy_reward_gap: float = setting(
        0.5, "Entropy-reward: relative entropy drop from the baseline minus the reward's rise from it."
    )
    reward_drop: float = setting(0.3, "Reward drop: the highest trailing reward so far minus the trailing reward.")
    clip_ratio: float = setting(0.2, "Clip ratio: share of tokens whose importance ratio left the clip range.")
    kl: float = setting(0.5, "KL: per-token KL to the reference policy (where beta > 0).")
    combine: list[str] = setting(
        ["entropy_collapse", "grad_norm_spike", "length_surge", "entropy_reward", "reward_drop"],
        "Combined: the detectors it counts.",
    )
    combine_k: int = setting(2, "Combined: fires when this many of `combine` fired in the last combine_window steps.")
    combine_window: int = setting(5, "Combined: steps in which its detectors' firing counts.")


@dataclass(frozen=True)
class TrackingSettings:
    """The optional experiment tracker mirroring the parquet logs (trainer/rl/tracking.py); not hashed."""

    backend: str = setting("none", "none, mlflow, tensorboard or wandb (docs/tracking.md).")
    project: str = setting("marl-sweep", "MLflow experiment / TensorBoard subdirectory / wandb project.")
    tags: list[str] = setting([], "MLflow and wandb run tags.")
    dir: str | None = setting(None, "Directory of the local stores and wandb's offline files (None: results/tracking).")
    mlflow_tracking_uri: str | None = setting(None, "MLflow server (None: MLFLOW_TRACKING_URI, else a file store).")


@dataclass(frozen=True)
class VllmSettings:
    """The vllm rollout backend's engine (trainer/rl/vllm_engine.py); ignored by hf."""

    gpu_memory_utilization: float = setting(0.3, "Share of the GPU's memory the engine takes (weights + KV cache).")
    max_model_len: int | None = setting(None, "Longest sequence served (None: the run's prompt + completion lengths).")
    enforce_eager: bool = setting(False, "No CUDA graphs (faster start-up, slower decoding).")
    enable_sleep_mode: bool = setting(
        False,
        "Sleep the engine through each update (level 1: weights to CPU memory, "
        "KV cache dropped; woken before the sync; CUDA only).",
    )
    tensor_parallel_size: int = setting(
        1,
        "GPUs one engine is sharded over; preflight accepts 1 only (one engine "
        "per rank; tensor-parallel subgroups do not exist yet).",
    )
    max_lora_rank: int | None = setting(None, "Highest adapter rank served (None: lora.r rounded up to a vLLM rank).")


def check_importance_sampling(t: TrainingSettings) -> None:
    """The importance ratio's settings; top_p 1 with vllm: under top_p < 1 the engine's log-probs are
    renormalised over the nucleus (vLLM's processed_logprobs), the trainer's are not."""
    mode, lo, hi = (
        t.vllm_importance_sampling_mode,
        t.vllm_importance_sampling_clip_min,
        t.vllm_importance_sampling_clip_max,
    )
    if mode not in ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask"):  # grpo.IS_MODES
        raise SettingsError(
            f"training.vllm_importance_sampling_mode: {mode!r} is not token_truncate, token_mask, "
            "sequence_truncate or sequence_mask"
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
    """GRPO hyperparameters under TRL's GRPOConfig names, plus the multi-role knobs; defaults are TRL's where
    TRL has the field, config.yaml states the study's values."""

    finetune: str = setting("lora", "lora: one adapter per policy on a frozen base; full: a model copy each.")
    lora: LoraSettings = setting(LoraSettings(), "PEFT LoraConfig fields.")
    learning_rate: float = setting(1e-6, "AdamW learning rate.")
    lr_scheduler_type: str = setting("linear", "Learning-rate schedule: constant, linear or cosine.")
    warmup_ratio: float = setting(0.0, "Fraction of steps of linear warm-up.")
    adam_beta1: float = setting(0.9, "AdamW beta1.")
    adam_beta2: float = setting(0.999, "AdamW beta2.")
    weight_decay: float = setting(0.0, "AdamW weight decay.")
    max_grad_norm: float = setting(1.0, "Gradient clipping per policy.")
    max_steps: int = setting(300, "Training steps.")
    prompts_per_step: int = setting(64, "Distinct prompts per step.")
    num_generations: int = setting(8, "Rollouts (episodes) per prompt: the GRPO group.")
    num_iterations: int = setting(1, "Optimisation passes per generation batch.")
    loss_type: str = setting("dapo", "TRL's GRPO loss normalisation: grpo, dapo or dr_grpo.")
    beta: float = setting(0.0, "KL coefficient against the frozen reference.")
    use_bias_correction_kl: bool = setting(True, "Weight the KL term by the importance ratio (TRL's default).")
    epsilon: float = setting(0.2, "Lower clip range.")
    epsilon_high: float | None = setting(None, "Upper clip range (None: epsilon).")
    scale_rewards: str = setting("group", "group: divide advantages by the group std; none: do not.")
    temperature: float = setting(1.0, "Sampling temperature in training.")
    top_p: float = setting(1.0, "Nucleus sampling in training.")
    max_completion_length: int | None = setting(None, "Tokens per turn (None: the task's).")
    reward_mode: str = setting("final_outcome", "Reward of a turn: final_outcome or per_role.")
    advantage_grouping: str = setting("role_instance", "GRPO groups by prompt and role instance, or by episode.")
    normalize_advantages_per_role: bool = setting(False, "Divide each role's advantages by their std over the step.")
    micro_batch_tokens: int = setting(16384, "Token budget of one training micro-batch.")
    agent_gradients: bool = setting(
        False,
        "Record each parallel agent's gradient (voter k, worker k): micro-batches "
        "split per agent, which changes float summation order; off: per role.",
    )
    gradient_checkpointing: bool = setting(False, "Recompute activations in backward (real scales).")
    generation_backend: str = setting("hf", "Rollout backend: hf (Hugging Face generate) or vllm.")
    vllm: VllmSettings = setting(VllmSettings(), "The vllm backend's engine settings.")
    vllm_importance_sampling_correction: bool = setting(  # TRL's default is on; off keeps earlier vllm runs as run
        False,
        "vllm backend: weight each token's loss by TRL's truncated/masked importance ratio between the "
        "trainer's and the engine's log-probs (the hf backend samples on-policy: no-op).",
    )
    vllm_importance_sampling_mode: str = setting(
        "sequence_mask", "token_truncate, token_mask, sequence_truncate or sequence_mask (TRL's names and default)."
    )
    vllm_importance_sampling_clip_max: float | None = setting(3.0, "Upper bound of the importance ratio (TRL's C_max).")
    vllm_importance_sampling_clip_min: float | None = setting(None, "Lower bound of the importance ratio (C_min).")
    on_warning: str = setting("log", "What an early warning does: log, or stop (checkpoint, end done-early).")
    early_warning: EarlyWarningSettings = setting(EarlyWarningSettings(), "The early-warning detectors' thresholds.")
    generation_memory_gb: float | None = setting(
        None, "KV-cache budget (GiB) of one HF generate chunk (None: half the GPU's free memory, 2 GiB on CPU)."
    )
    eval_every: int = setting(10, "Steps between evals (and one at step 0 and at the last).")
    save_every: int = setting(10, "Steps between checkpoints.")
    keep_last: int = setting(2, "Checkpoints kept.")
    eval_temperature: float = setting(0.7, "Sampling temperature in eval (0 is greedy).")
    eval_problems: int | str = setting(500, "Problems per eval split, at most, or `all` (a split's own replaces it).")
    eval_samples: int = setting(1, "Episodes per eval problem (k) at eval_temperature: pass_at_k, accuracy_std.")
    eval_chunk_problems: int = setting(256, "Problems per eval chunk: the unit a requeued job's eval resumes from.")
    samples_per_eval: int = setting(16, "Episodes kept in samples.parquet per eval.")
    enable_thinking: bool = setting(False, "Qwen3 thinking mode in the chat template.")
    max_skipped: int = setting(10, "Steps with a non-finite loss or gradient tolerated before the run fails.")
    policy_groups: dict[str, list[str]] | None = setting(
        None, "A custom routing (policy name -> its roles); None: the run's policy mode."
    )

    def __post_init__(self) -> None:
        if self.epsilon_high is not None and self.epsilon_high < self.epsilon:
            raise SettingsError(
                f"training.epsilon_high ({self.epsilon_high}) is below training.epsilon "
                f"({self.epsilon}): raise it, or set it to null to use epsilon"
            )
        if self.generation_backend not in ("hf", "vllm"):
            raise SettingsError(f"training.generation_backend: {self.generation_backend!r} is not hf or vllm")
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


def check_eval_problems(value: Any, path: str) -> None:
    """An eval_problems value is a positive integer or `all`; raise naming `path` otherwise."""
    if value == "all" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return
    raise SettingsError(f"{path}: {value!r} is neither a positive integer nor `all`")


def eval_problem_limit(split_value: int | str | None, training_value: int | str) -> int | None:
    """The problems an eval split keeps at most: its own eval_problems, else training's; None: all."""
    value = training_value if split_value is None else split_value
    return None if value == "all" else int(value)


@dataclass(frozen=True)
class TinySettings:
    """Architecture and warm start of the offline tiny model (trainer/models/base_model.py)."""

    vocab_size: int = setting(512, "Retrained tokenizer vocabulary.")
    hidden_size: int = setting(128, "Hidden size.")
    intermediate_size: int = setting(384, "MLP size.")
    num_hidden_layers: int = setting(2, "Layers.")
    num_attention_heads: int = setting(4, "Attention heads.")
    num_key_value_heads: int = setting(2, "KV heads.")
    warm_start_steps: int = setting(1100, "Supervised warm-start steps (at most, with warm_start_decay_below).")
    warm_start_batch_size: int = setting(32, "Warm-start batch size.")
    warm_start_learning_rate: float = setting(6.0e-3, "Warm-start learning rate.")
    warm_start_decay_below: float | None = setting(
        0.12,
        "Start the final decay once the completion loss (mean of 20 steps) is below this; null: over the last quarter.",
    )
    warm_start_decay_steps: int = setting(150, "Steps of the final decay (with warm_start_decay_below).")
    warm_start_warmup_steps: int = setting(50, "Warm-start steps of linear learning-rate warm-up.")
    warm_start_prompt_loss: float = setting(
        0.3, "Weight of the prompt tokens' loss beside the completion's (0: completion tokens only)."
    )
    warm_start_micro_batches: int = setting(4, "Length-sorted micro-batches per warm-start step.")
    flawed_demonstrations: float = setting(
        0.0, "Share of the warm start's solution demonstrations with the task's typical mistake."
    )
    seed: int = setting(0, "Seed of the build.")


@dataclass(frozen=True)
class ModelSettings:
    """The base model of a scale."""

    name: str = setting("tiny", "A Hugging Face id, a local path, or `tiny` (built offline).")
    dtype: str = setting("float32", "Parameter dtype of the base model on GPU (CPU runs use float32).")
    tiny: TinySettings | None = setting(None, "Architecture and warm start of the tiny model (model `tiny` only).")
    revision: str | None = setting(None, "The hub commit: scales.<scale>.revision, else prefetch's (hashed).")
    content_hash: str | None = setting(None, "The content hash of a prefetched model's files (hashed).")


@dataclass(frozen=True)
class ResourceSettings:
    """What one training job asks of the cluster."""

    gpus: int = setting(0, "GPUs per job: one data-parallel process per GPU (NCCL).")
    processes: int = setting(1, "Data-parallel processes of a CPU run (gloo); with GPUs 1 or equal to gpus.")
    cpus: int = setting(1, "CPU cores per job (also the torch threads of a CPU run).")
    mem_gb: float = setting(4, "Memory per job in GiB.")
    time_min: int = setting(60, "Wall-time limit per job in minutes.")
    collective_timeout_min: float = setting(60, "Minutes a process waits at a collective for its peers (DDP).")


@dataclass(frozen=True)
class LauncherSettings:
    """How train jobs run (submitit)."""

    backend: str = setting("local", "slurm: a cluster job; local: a subprocess; debug: in-process.")
    partition: str | None = setting(None, "SLURM partition.")
    account: str | None = setting(None, "SLURM account.")
    qos: str | None = setting(None, "SLURM QOS.")
    sbatch_extra: dict[str, Any] = setting({}, "Further sbatch options (submitit slurm_additional_parameters).")
    max_num_timeout: int = setting(3, "Requeues on timeout or preemption before a run fails.")
    signal_delay_s: int = setting(120, "Seconds before the time limit at which SLURM signals the job.")
    poll_interval_s: float = setting(0.5, "Seconds between looks at the job (slurm profile: 30).")
    array_window_s: float | None = setting(
        None,
        "slurm: collect the sweep's submissions for this many seconds "
        "into job arrays (one sbatch call each); None: one job per run.",
    )
    allow_unisolated_sandbox: bool = setting(False, "A RISK: run code programs unisolated where no isolation works.")


@dataclass(frozen=True)
class WorkflowSettings:
    """Per-workflow knobs (each workflow reads its own)."""

    max_iterations: int = setting(3, "eval_opt: generate/evaluate rounds at most.")
    n_votes: int = setting(3, "voting: parallel voters.")
    max_subtasks: int = setting(3, "orch_workers: subtasks at most.")
    share_main_task_with_workers: bool = setting(False, "orch_workers: workers also see the whole problem.")
    module: str | None = setting(None, "The module registering a workflow defined outside trainer/workflows/.")


# The fields every source entry may carry (eval_problems: an eval split's own limit).
COMMON_SOURCE_FIELDS = ("name", "source", "from_train_holdout", "eval_problems")
# Per source type: the fields it needs and the fields it takes (besides COMMON_SOURCE_FIELDS).
SOURCE_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "hf": (
        ("path",),
        (
            "path",
            "config_name",
            "split",
            "question_field",
            "answer_field",
            "id_field",
            "holdout_fraction",
            "holdout_seed",
            "revision",
            "content_hash",
        ),
    ),
    "local": (
        ("path",),
        ("path", "split", "question_field", "answer_field", "id_field", "holdout_fraction", "holdout_seed"),
    ),
    "reasoning_gym": (("dataset", "size"), ("dataset", "size", "seed", "params", "demonstration")),
    "synthetic_functions": (("size",), ("size", "seed")),
    "human_eval": ((), ()),
}


@dataclass(frozen=True)
class SourceSettings:
    """Where a task's problems come from (one train source, or one eval split)."""

    name: str | None = setting(None, "Name of the eval split in eval.parquet.")
    source: str | None = setting(None, "hf, local, reasoning_gym, synthetic_functions or human_eval.")
    path: str | None = setting(None, "Dataset id (hf) or file path (local).")
    config_name: str | list[str] | None = setting(None, "The dataset's configuration(s) (hf; a list joins them).")
    split: str = setting("train", "The dataset split to read.")
    question_field: str | None = setting(None, "Column holding the problem text.")
    answer_field: str | None = setting(None, "Column holding the gold answer or tests.")
    id_field: str | None = setting(None, "Column holding a problem id (default the row index).")
    holdout_fraction: float = setting(0.0, "Fraction held out of training for eval.")
    holdout_seed: int = setting(0, "Seed of the train/holdout split.")
    from_train_holdout: bool = setting(False, "This eval split is the train source's holdout.")
    dataset: str | None = setting(None, "The reasoning-gym dataset name.")
    size: int | None = setting(None, "Number of problems to generate.")
    seed: int = setting(0, "Seed of a generated source.")
    params: dict[str, Any] = setting({}, "Further generator parameters (reasoning-gym config).")
    demonstration: str = setting("answer", "reasoning_gym: the warm start's demonstration, answer or worked.")
    revision: str | None = setting(None, "hf: the dataset commit to read (pinned by the prefetch rule).")
    content_hash: str | None = setting(None, "hf: the content hash of the prefetched dataset files.")
    eval_problems: int | str | None = setting(None, "An eval split's problems at most, or `all` (None: training's).")

    def check(self, path: str, given: set[str]) -> None:
        """Raise naming `path` where the source type lacks a field it needs or has one of another type."""
        if self.eval_problems is not None:
            check_eval_problems(self.eval_problems, f"{path}.eval_problems")
        if self.from_train_holdout:
            return
        if self.source not in SOURCE_FIELDS:
            raise SettingsError(f"{path}.source: {self.source!r} is not one of {', '.join(SOURCE_FIELDS)}")
        needs, takes = SOURCE_FIELDS[self.source]
        missing = [k for k in needs if getattr(self, k) is None]
        foreign = sorted(given - set(takes) - set(COMMON_SOURCE_FIELDS))
        if missing or foreign:
            raise SettingsError(
                f"{path}: a {self.source} source needs {list(needs)} and takes only "
                f"{list(takes)}; missing {missing}, not its fields {foreign}"
            )


@dataclass(frozen=True)
class TaskSettings:
    """A task's data sources and limits."""

    train: SourceSettings = setting(SourceSettings(), "The train source.")
    eval: list[SourceSettings] = setting([], "Eval splits.")
    max_completion_length: int = setting(512, "Tokens per turn.")


def task_settings(data: dict[str, Any], path: str) -> TaskSettings:
    """A task's settings from its dict, each source checked against its type."""
    task = from_dict(TaskSettings, data, path)
    if "train" in data:
        task.train.check(f"{path}.train", set(data["train"]))
        if task.train.eval_problems is not None:
            raise SettingsError(f"{path}.train.eval_problems: a setting of eval splits, not of the train source")
    for i, spec in enumerate(data.get("eval", [])):
        task.eval[i].check(f"{path}.eval.{i}", set(spec))
    return task


POLICY_MODES = ("shared", "isolated")


@dataclass(frozen=True)
class RunSettings:
    """Everything one run reads: its config.json (written by `trainer launch`), typed.

    `raw` keeps the dict it was read from: config.json is rewritten from it into each checkpoint
    (the same bytes, the same `config_hash`), and defaults are never written back into it.
    """

    run: str = setting("", "The run id, e.g. voting-math-tiny-shared-s0.")
    workflow: str = setting("single", "The workflow (registered in trainer.workflows.registry).")
    task: str = setting("math", "The task: math or code.")
    scale: str = setting("tiny", "The scale (a key of config.yaml's scales).")
    policy: str = setting("shared", "shared: all roles update one policy; isolated: one per role.")
    seed: int = setting(0, "The run's seed (data order, sampling, initialisation).")
    variant: str | None = setting(
        None, "The run's variant (a named config delta of its matrix), absent for a plain run."
    )
    model: ModelSettings = setting(ModelSettings(), "The base model of the scale.")
    workflow_params: WorkflowSettings = setting(WorkflowSettings(), "The workflow's knobs.")
    task_params: TaskSettings = setting(TaskSettings(), "The task's data sources and limits.")
    training: TrainingSettings = setting(TrainingSettings(), "GRPO hyperparameters.")
    resources: ResourceSettings = setting(ResourceSettings(), "What the job asks of the cluster.")
    launcher: LauncherSettings = setting(LauncherSettings(), "How the job runs.")
    tracking: TrackingSettings = setting(TrackingSettings(), "The optional experiment tracker (unhashed).")
    base_model: dict[str, Any] | None = setting(None, "model.json of the base model build (path, facts).")
    config_hash: str | None = setting(None, "Content hash of the hashed view (trainer.contract.config.config_hash).")
    peak_smoothing_window: int = setting(
        SMOOTHING_WINDOW,
        "Evals in the smoothing of the peak the trainer keeps: "
        "config.yaml's analysis.smoothing_window, recorded where not the default "
        "(unhashed).",
    )
    roles: list[str] = setting([], "The workflow's roles, as launch records them for the analysis (unhashed).")
    parallel_role: dict[str, Any] | None = setting(
        None, "The role with parallel agents on one prompt and their number ({role, agents}), or None (unhashed)."
    )
    raw: dict[str, Any] = field(
        default_factory=dict,
        repr=False,
        compare=False,
        metadata={"help": "The dict these settings were read from (config.json)."},
    )

    def __post_init__(self) -> None:
        if self.policy not in POLICY_MODES:
            raise SettingsError(f"policy: {self.policy!r} is not one of {', '.join(POLICY_MODES)}")
        if self.model.name == "tiny" and not self.model.tiny:
            raise SettingsError(
                f"run {self.run}: model `tiny` needs its architecture: set scales.{self.scale}.tiny "
                f"(see config.yaml's tiny scale)"
            )
        if self.training.max_completion_length is None:
            raise SettingsError(
                f"run {self.run}: training.max_completion_length is unset; resolve the run config "
                f"first (trainer.sweep.config.resolve_run_config sets the task's)"
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSettings:
        """Settings of a resolved run config (config.json, or resolve_run_config's output)."""
        if "raw" in data:
            raise SettingsError("raw: unknown key")
        fields = {k: v for k, v in data.items() if k != "task_params"}
        settings = from_dict(cls, fields, "<run>")
        task = task_settings(data["task_params"], f"tasks.{settings.task}") if "task_params" in data else TaskSettings()
        return dataclasses.replace(settings, task_params=task, raw=data)
