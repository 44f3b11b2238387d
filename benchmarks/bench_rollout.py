"""Rollout step: Hugging Face (chunked) against vLLM on the same model, prompts and sampling settings.

    .venv-vllm/bin/python -m benchmarks.bench_rollout [--prompts 4 --generations 4 --tokens 32]

For shared and isolated voting, one trainer per backend runs the same rollout steps (a warm-up
step, then `--steps` measured ones) and the script prints generated tokens per second and seconds
per step of each, and the vLLM/HF ratios side by side. On CPU the model is a random Qwen3 of the
`tiny` scale's shape with the small-vocabulary Qwen3 tokenizer; `--size 0.6b|1.7b` builds a random-weight
Qwen3 from its published shape with the real Qwen3 tokenizer (GPUs: benchmarks/device_check.sh).
The shared-policy figures (generated and trained tokens per second) are recorded in
trainer/sweep/measured_rates/<device>.json for the cost plan (trainer/sweep/measured.py).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from tests.local_qwen3 import qwen3_tokenizer, real_scale_config, save_random_qwen3, small_vocab_tokenizer
from trainer.sweep.measured import device_name, record_rate

# the published configs' shapes (Qwen/Qwen3-0.6B and -1.7B config.json), weights random
QWEN3 = {
    "0.6b": {
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
    },
    "1.7b": {
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
    },
}
PAPER = (64, 8, 5120, 300)
MODEL_IDS = {
    "tiny": "tiny",
    "0.6b": "Qwen/Qwen3-0.6B",
    "1.7b": "Qwen/Qwen3-1.7B",
}  # what the plan looks up  # prompts, rollouts, completion tokens, steps of a paper run


def build_model(d: Path, size: str) -> Path:
    """A random Qwen3: the tiny scale's shape (small vocabulary), or Qwen3-0.6B's/1.7B's (151k vocabulary)."""
    if size == "tiny":
        return save_random_qwen3(d / "model", small_vocab_tokenizer(512), hidden_size=128, num_hidden_layers=4)
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tok = qwen3_tokenizer()
    config = Qwen3Config(
        vocab_size=len(tok),
        tie_word_embeddings=True,
        max_position_embeddings=8192,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        **QWEN3[size],
    )
    Qwen3ForCausalLM(config).to(torch.bfloat16).save_pretrained(d / "model")
    tok.save_pretrained(d / "model")
    return d / "model"


def measure(model: Path, backend: str, mode: str, args: argparse.Namespace, d: Path) -> dict[str, float]:
    """Seconds per rollout step and generated tokens per second of one backend."""
    from trainer.rl.train import Trainer

    run = f"voting-math-qwen3-0.6b-{mode}-s0"
    cfg = real_scale_config(
        model,
        run,
        d / f"{backend}-{mode}",
        problems=64,
        training={
            "generation_backend": backend,
            "prompts_per_step": args.prompts,
            "num_generations": args.generations,
            "max_completion_length": args.tokens,
            "lora": {"r": 16, "lora_alpha": 32},
        },
    )
    trainer = Trainer(cfg, d / f"{backend}-{mode}")
    trainer.rollout(1)  # warm-up: vLLM compiles its kernels on the first call
    tokens0, t0 = trainer.generate.generated_tokens, time.perf_counter()
    for step in range(2, 2 + args.steps):
        episodes, _ = trainer.rollout(step)
    seconds = time.perf_counter() - t0
    tokens = trainer.generate.generated_tokens - tokens0
    turns = [t for ep in episodes for t in ep.turns]  # the last step's, trained on as a run would
    t1 = time.perf_counter()
    for policy in trainer.policies:
        trainer.update(policy, trainer.policy_rows(policy, turns))
    update_s = time.perf_counter() - t1
    peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else float("nan")
    return {
        "step_s": seconds / args.steps,
        "tokens_per_s": tokens / seconds,
        "tokens_per_step": tokens / args.steps,
        "update_tokens_per_s": sum(len(t.completion.completion_ids) for t in turns) / update_s,
        "peak_gpu_gib": peak,
    }


def extrapolate(rows: dict, args: argparse.Namespace) -> None:
    """Rollout time of a paper run (PAPER), linear in prompts x rollouts x tokens (attention's quadratic
    share ignored: a lower bound), against the scale's time_min in config.yaml."""
    import yaml

    prompts, rollouts, tokens, steps = PAPER
    factor = prompts * rollouts * tokens / (args.prompts * args.generations * args.tokens)
    scales = yaml.safe_load((Path(__file__).parents[1] / "config.yaml").read_text())["scales"]
    limit = scales.get(f"qwen3-{args.size}", {}).get("resources", {}).get("time_min")
    for (backend, mode), r in rows.items():
        hours = r["step_s"] * factor * steps / 3600
        print(
            f"extrapolated {backend:4} {mode:8}: {r['step_s'] * factor:8.0f} s/step at {prompts}x{rollouts}x{tokens}, "
            f"{hours:6.1f} h for {steps} steps (rollouts only) vs time_min {limit} min"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--size", choices=["tiny", *QWEN3], default="tiny", help="random Qwen3 of this shape")
    parser.add_argument("--backends", default="hf,vllm", help="comma list (skip one that is not installed)")
    parser.add_argument(
        "--extrapolate", action="store_true", help=f"to {PAPER[0]}x{PAPER[1]}x{PAPER[2]} and {PAPER[3]} steps"
    )
    args = parser.parse_args()
    backends = args.backends.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        model = build_model(d, args.size)
        rows = {(b, m): measure(model, b, m, args, d) for m in ("shared", "isolated") for b in backends}
    device = device_name()
    print(
        f"rollout step, voting, {args.prompts}x{args.generations} prompts x rollouts, {args.tokens} tokens, "
        f"random Qwen3 {args.size} on {device}"
    )
    print(f"{'mode':9} {'hf tok/s':>9} {'vllm tok/s':>10} {'vllm/hf':>8} {'hf s/step':>10} {'vllm s/step':>11}")
    for m in ("shared", "isolated"):
        if len(backends) < 2:
            break
        hf, vl = rows[("hf", m)], rows[("vllm", m)]
        print(
            f"{m:9} {hf['tokens_per_s']:9.1f} {vl['tokens_per_s']:10.1f} "
            f"{vl['tokens_per_s'] / hf['tokens_per_s']:7.2f}x {hf['step_s']:10.2f} {vl['step_s']:11.2f}"
        )
    for (b, m), r in rows.items():
        print(
            f"{b:4} {m:8} {r['tokens_per_s']:9.1f} tok/s {r['step_s']:8.2f} s/step peak GPU {r['peak_gpu_gib']:.1f} GiB"
        )
    if args.extrapolate:
        extrapolate(rows, args)
    for b in backends:  # the cost plan's rates (trainer/sweep/measured.py): the shared-policy figures
        r = rows[(b, "shared")]
        out = record_rate(
            {
                "model": MODEL_IDS[args.size],
                "backend": b,
                "generate_tokens_per_s": r["tokens_per_s"],
                "update_tokens_per_s": r["update_tokens_per_s"],
                "peak_gpu_gib": r["peak_gpu_gib"],
                "measured_by": f"bench_rollout voting shared {args.prompts}x{args.generations}x{args.tokens}",
            },
            device,
        )
    print(f"written: {out}")


if __name__ == "__main__":
    main()
