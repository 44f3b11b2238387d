"""The memory model (trainer/models/memory.py) against measured peaks at Qwen3-0.6B's real width, on CPU.

    python -m benchmarks.bench_memory_model            # the table: predicted, measured, their ratio
    python -m benchmarks.bench_memory_model --markdown # the same as a Markdown table (docs/benchmarks.md)

A random-weight model of Qwen3-0.6B's published configuration (28 layers, hidden 1024, 16 heads, 8 KV
heads, head_dim 128, intermediate 3072, vocabulary 151,936; transformers' Qwen3Config, nothing
downloaded) in float32, as the trainer runs on CPU. Three moments, each in a fresh subprocess:

- rollout: one generate chunk as HFGenerator runs it (the shared prompt prefill, then sampling at the
  study's temperature, every row forced to its full length);
- prefill: the shared prompt cache of a stage's distinct prompts (trainer.rl.rollout.shared_prompt_cache);
- update: one micro-batch's forward and backward through a rank-64 LoRA on every linear map, gradient
  checkpointing on (the paper's settings), log-probs and entropies of the completion (trainer.rl.grpo).

Measured: peak resident memory growth. The subprocess builds the model and inputs, resets the kernel's
peak-RSS mark (`5` into /proc/self/clear_refs), reads VmRSS, runs the moment and reads VmHWM; the growth
is VmHWM - VmRSS. glibc is told to map every block of 64 KiB or more on its own and unmap it when freed
(MALLOC_ENV), and the heap is trimmed before the baseline, so resident memory is live memory. Predicted: trainer/models/memory.py at the same shapes.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import re
import subprocess
import sys
import time

SHAPE = {
    "vocab_size": 151936,
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
}
ROLLOUT = {"distinct": 2, "rows": 16, "prompt": 64, "new": 8}
PREFILL = {"distinct": 2, "rows": 8, "prompt": 128}
UPDATE = {"rows": 1, "prompt": 64, "completion": 256, "lora_r": 64}
MOMENTS = ("rollout", "prefill", "update")
# glibc serves blocks of 64 KiB and more with mmap and unmaps them when freed: resident memory is live memory
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}


def status_kib(field: str) -> int:
    """A /proc/self/status field in KiB (VmRSS, VmHWM)."""
    with open("/proc/self/status") as f:
        return int(re.search(rf"{field}:\s+(\d+)", f.read()).group(1))


def build_model():
    """Qwen3-0.6B's configuration with random weights, float32, in eval mode."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(**SHAPE, max_position_embeddings=4096, tie_word_embeddings=True, torch_dtype="float32")
    return Qwen3ForCausalLM(config).eval()


def prompts(distinct: int, rows: int, length: int):
    """`rows` prompts of `length` random tokens, each of `distinct` prompts repeated, and their mask."""
    import torch

    base = torch.randint(10, SHAPE["vocab_size"], (distinct, length))
    ids = base.repeat_interleave(rows // distinct, dim=0)
    return ids, torch.ones_like(ids)


def run_rollout(model) -> tuple[callable, int]:
    """One generate chunk (HFGenerator's call) and its predicted peak."""
    import torch

    from trainer.models.memory import rollout_chunk_bytes
    from trainer.rl.rollout import shared_prompt_cache

    s = ROLLOUT
    ids, mask = prompts(s["distinct"], s["rows"], s["prompt"])

    def go():
        with torch.no_grad():
            model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=s["new"],
                min_new_tokens=s["new"],
                do_sample=True,
                temperature=0.7,
                top_p=1.0,
                top_k=0,
                use_cache=True,
                pad_token_id=0,
                past_key_values=shared_prompt_cache(model, ids, mask),
            )

    return go, rollout_chunk_bytes(SHAPE, 4, s["rows"], s["prompt"] + s["new"])


def run_prefill(model) -> tuple[callable, int]:
    """The shared prompt prefill of a stage and its predicted peak."""
    import torch

    from trainer.models.memory import prefill_bytes
    from trainer.rl.rollout import shared_prompt_cache

    s = PREFILL
    ids, mask = prompts(s["distinct"], s["rows"], s["prompt"])
    kept = []

    def go():
        with torch.no_grad():
            kept.append(shared_prompt_cache(model, ids, mask))  # held, as generate holds it

    return go, prefill_bytes(SHAPE, 4, s["distinct"], s["rows"], s["prompt"])


def run_update(model) -> tuple[callable, int]:
    """One LoRA micro-batch's forward and backward under gradient checkpointing and its predicted peak."""
    from peft import LoraConfig, get_peft_model

    from trainer.models.memory import update_bytes
    from trainer.models.size import lora_parameters
    from trainer.rl.grpo import per_token_logps

    s = UPDATE
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
    peft = get_peft_model(
        model,
        LoraConfig(r=s["lora_r"], lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"),
    )
    peft.train()
    ids, mask = prompts(s["rows"], s["rows"], s["prompt"] + s["completion"])

    def go():
        logps, entropy = per_token_logps(peft, ids, mask, s["completion"], 0.7, with_entropy=True)
        (-logps.mean()).backward()

    width = s["prompt"] + s["completion"]
    return go, update_bytes(
        SHAPE,
        4,
        s["rows"],
        width,
        s["completion"],
        checkpointing=True,
        trained_params=lora_parameters(SHAPE, s["lora_r"]),
    )


def measure_one(name: str) -> dict[str, float]:
    """Build, reset the peak mark, run the moment: its predicted and measured peak growth in bytes."""
    import torch

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    model = build_model()
    go, predicted = {"rollout": run_rollout, "prefill": run_prefill, "update": run_update}[name](model)
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # freed heap back to the kernel: the baseline is live memory
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak-RSS mark (VmHWM) restarts at the current RSS
    base = status_kib("VmRSS")
    start = time.perf_counter()
    go()
    return {
        "moment": name,
        "predicted": predicted,
        "measured": (status_kib("VmHWM") - base) * 1024,
        "seconds": time.perf_counter() - start,
    }


def table(rows: list[dict[str, float]], markdown: bool) -> str:
    """Predicted, measured (MiB) and predicted over measured, one moment a line."""
    shapes = {"rollout": ROLLOUT, "prefill": PREFILL, "update": UPDATE}
    head = ["moment", "shape", "predicted MiB", "measured MiB", "predicted/measured", "s"]
    lines = [
        [
            r["moment"],
            " ".join(f"{k}={v}" for k, v in shapes[r["moment"]].items()),
            f"{r['predicted'] / 2**20:.0f}",
            f"{r['measured'] / 2**20:.0f}",
            f"{r['predicted'] / r['measured']:.2f}",
            f"{r['seconds']:.0f}",
        ]
        for r in rows
    ]
    if markdown:
        return "\n".join("| " + " | ".join(x) + " |" for x in [head, ["---"] * len(head)] + lines)
    widths = [max(len(x[i]) for x in [head] + lines) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(x, widths)) for x in [head] + lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--one", choices=MOMENTS, help="measure one moment in this process (the runner's subprocess)")
    p.add_argument("--only", nargs="+", choices=MOMENTS, default=list(MOMENTS))
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args()
    if args.one:
        print(json.dumps(measure_one(args.one)))
        return 0
    rows = []
    for name in args.only:
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.bench_memory_model", "--one", name],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, **MALLOC_ENV},
        ).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    print(table(rows, args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
