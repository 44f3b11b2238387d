"""A single-role GRPO step of this trainer against TRL's `GRPOTrainer` on the same model and prompts.

    python -m benchmarks.bench_step_vs_trl [--prompts 8 --generations 4 --tokens 32 --steps 3 --full-vocab]

Both sides: a random Qwen3 of the `tiny` scale's shape (the small-vocabulary Qwen3 tokenizer, or with
`--full-vocab` the real one, 151k entries), the same LoRA adapter (r 16, all linear layers), the same
prompts (the `single` math workflow's, rendered with the chat template once and given to TRL as text),
sampling at the run's temperature, and every completion forced to `--tokens` tokens (the model's
generation_config.min_new_tokens, which both `generate` calls read), so both train on the same token
count. After a warm-up step, `--steps` steps are timed: the whole step and the update alone (the step
less its rollout: generation and scoring), printed as ours/TRL ratios side by side (below 1: faster).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from tests.local_qwen3 import qwen3_tokenizer, real_scale_config, save_random_qwen3, small_vocab_tokenizer
from trainer.models.chat import chat_prompt

RUN = "single-math-qwen3-0.6b-shared-s0"
LORA = {"r": 16, "lora_alpha": 32, "lora_dropout": 0.0, "target_modules": "all-linear"}


def force_length(model: Any, tokens: int) -> None:
    """Every completion runs to `tokens` tokens: EOS is barred until then (what both `generate`s read)."""
    model.generation_config.min_new_tokens = tokens


def timed(obj: Any, name: str, seconds: list[float]) -> None:
    """Wrap method `name` of `obj` so each call's wall time is appended to `seconds`."""
    inner = getattr(obj, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - t0)

    setattr(obj, name, wrapper)


class Recorder:
    """A generation backend that records the prompts it is called with (else the wrapped one)."""

    def __init__(self, inner: Any):
        self.inner, self.prompts = inner, []

    def __call__(self, role: str, prompts: list[str]) -> Any:
        self.prompts.extend(prompts)
        return self.inner(role, prompts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def ours(model_dir: Path, args: argparse.Namespace, d: Path) -> tuple[dict[str, float], list[str], dict]:
    """This trainer's step and update times, the prompts it generated for, and its training settings."""
    from trainer.rl.train import Trainer

    cfg = real_scale_config(
        model_dir,
        RUN,
        d / "ours",
        problems=64,
        training={
            "prompts_per_step": args.prompts,
            "num_generations": args.generations,
            "max_completion_length": args.tokens,
            "lora": LORA,
            "max_steps": args.steps + 1,
        },
    )
    trainer = Trainer(cfg, d / "ours", log=lambda msg: None)
    torch.set_num_threads(args.threads)
    for m in trainer.policies.modules():
        force_length(m, args.tokens)
    recorder = Recorder(trainer.generate.inner)
    trainer.generate.inner = recorder
    rollout_s: list[float] = []
    timed(trainer, "rollout", rollout_s)
    trainer.train_step(1)  # warm-up
    rollout_s.clear()
    t0 = time.perf_counter()
    for step in range(2, 2 + args.steps):
        trainer.train_step(step)
    step_s = (time.perf_counter() - t0) / args.steps
    tokens = sum(r["n_tokens"] for r in trainer.train_rows if r["step"] >= 2) / args.steps
    first = recorder.prompts[: args.prompts * args.generations : args.generations]  # one per group
    rendered = [chat_prompt(trainer.tokenizer, p, trainer.t.enable_thinking) for p in first]
    return (
        {"step_s": step_s, "update_s": step_s - sum(rollout_s) / args.steps, "tokens": tokens},
        rendered,
        cfg["training"],
    )


def trl_config(training: dict, args: argparse.Namespace, d: Path) -> Any:
    """TRL's GRPOConfig with this trainer's `training` settings: one step of `args.prompts` groups on CPU."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(d / "trl"),
        report_to="none",
        use_cpu=True,
        bf16=False,
        fp16=False,
        seed=0,
        per_device_train_batch_size=args.prompts * args.generations,
        num_generations=args.generations,
        gradient_accumulation_steps=1,
        max_completion_length=args.tokens,
        temperature=training["temperature"],
        top_p=training["top_p"],
        loss_type=training["loss_type"],
        beta=training["beta"],
        epsilon=training["epsilon"],
        epsilon_high=training["epsilon_high"],
        scale_rewards=training["scale_rewards"],
        learning_rate=training["learning_rate"],
        lr_scheduler_type="constant",
        max_grad_norm=training["max_grad_norm"],
        gradient_checkpointing=training["gradient_checkpointing"],
        max_steps=args.steps + 1,
        logging_steps=1,
        save_strategy="no",
        dataloader_num_workers=0,
    )


def trl(model_dir: Path, prompts: list[str], training: dict, args: argparse.Namespace, d: Path) -> dict[str, float]:
    """TRL GRPOTrainer's step and update times on the same model, prompts, adapter and settings."""
    import datasets
    from peft import LoraConfig
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    n = args.prompts * args.generations
    config = trl_config(training, args, d)
    data = datasets.Dataset.from_list([{"prompt": p} for p in prompts])
    rng = torch.Generator().manual_seed(0)
    trainer = GRPOTrainer(
        model=str(model_dir),
        args=config,
        train_dataset=data,
        processing_class=tok,
        reward_funcs=lambda completions, **kw: torch.rand(len(completions), generator=rng).tolist(),
        peft_config=LoraConfig(**LORA),
    )
    force_length(trainer.model, args.tokens)
    torch.set_num_threads(args.threads)
    generate_s: list[float] = []
    timed(trainer, "_generate_and_score_completions", generate_s)
    starts: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            starts.append(time.perf_counter())

        def on_train_end(self, *a: Any, **k: Any) -> None:
            starts.append(time.perf_counter())

    trainer.add_callback(StepClock())
    trainer.train()
    step_s = (starts[-1] - starts[1]) / args.steps  # from the second step's start: the first warms up
    lengths = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    return {
        "step_s": step_s,
        "update_s": step_s - sum(generate_s[1:]) / args.steps,
        "tokens": n * sum(lengths[1:]) / args.steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--full-vocab", action="store_true", help="the real Qwen3 tokenizer (151k entries)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        tok = qwen3_tokenizer() if args.full_vocab else small_vocab_tokenizer(512)
        model_dir = save_random_qwen3(d / "model", tok, hidden_size=128, num_hidden_layers=4)
        mine, prompts, training = ours(model_dir, args, d)
        theirs = trl(model_dir, prompts, training, args, d)
    print(
        f"single-role GRPO step, {args.prompts}x{args.generations} prompts x rollouts, {args.tokens} tokens forced, "
        f"LoRA r{LORA['r']}, vocabulary {len(tok)}, {args.threads} threads"
    )
    print(
        f"{'':8} {'ours s':>8} {'TRL s':>8} {'ours/TRL':>9}   (tokens per step: ours {mine['tokens']:.0f}, "
        f"TRL {theirs['tokens']:.0f})"
    )
    for key, label in (("step_s", "step"), ("update_s", "update")):
        print(f"{label:8} {mine[key]:8.3f} {theirs[key]:8.3f} {mine[key] / theirs[key]:8.2f}x")


if __name__ == "__main__":
    main()
