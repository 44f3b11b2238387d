"""Helpers of the real-scale tests: a small random Qwen3 with the real (full-vocabulary) Qwen3
tokenizer saved to a local directory, and run configs that point a real scale at it.

A real scale (`scales.qwen3-0.6b` in config.yaml) names a Hugging Face id or a local path; the
tests replace the id by the local directory, so the trainer loads model and tokenizer the way it
loads Qwen/Qwen3-0.6B (AutoTokenizer / AutoModelForCausalLM.from_pretrained), not the `tiny` rule.
The tasks are switched to their offline sources (the demo's reasoning-gym sums), at a few problems.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import transformers

from tests.workflow import ROOT
from trainer.contract.runid import parse_run_id
from trainer.models.base_model import build_base_model, build_tiny_model, build_tokenizer, qwen3_tokenizer_dir
from trainer.sweep.config import base_model_spec, load_yaml, resolve_run_config, validate_config
from trainer.sweep.launch import write_run_config

SCALE = "qwen3-0.6b"  # the real scale whose model the tests replace by a local directory


@functools.lru_cache(maxsize=1)
def qwen3_tokenizer():
    """The real Qwen3 tokenizer (151k entries), read once per session."""
    tok = transformers.AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir()))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def small_vocab_tokenizer(vocab_size: int = 300):
    """The Qwen3 tokenizer retrained to a small vocabulary on the arithmetic prompts (as the `tiny` scale's
    is): same special tokens, chat template and byte fallback, and a softmax of a few hundred entries."""
    texts = [f"Calculate {a} + {b}." for a in range(100) for b in range(10)] + ["user\nassistant\n"] * 50
    return build_tokenizer(texts, vocab_size)


def save_random_qwen3(
    path: Path, tokenizer=None, hidden_size: int = 64, num_hidden_layers: int = 2, seed: int = 0
) -> Path:
    """A randomly initialised Qwen3ForCausalLM over the tokenizer's vocabulary (default: the real Qwen3
    tokenizer, all 151k entries) and the tokenizer, both written with save_pretrained to `path` (what a
    downloaded model directory holds)."""
    tok = tokenizer if tokenizer is not None else qwen3_tokenizer()
    arch = {
        "hidden_size": hidden_size,
        "intermediate_size": 2 * hidden_size,
        "num_hidden_layers": num_hidden_layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    }
    model = build_tiny_model(
        arch, seed, vocab_size=len(tok), eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@functools.cache
def _yaml(name: str) -> dict[str, Any]:
    return load_yaml(ROOT / name)


def real_scale_config(
    model_dir: Path,
    run: str,
    run_dir: Path,
    training: dict[str, Any] | None = None,
    workflow_params: dict[str, Any] | None = None,
    problems: int = 8,
) -> dict[str, Any]:
    """config.json of `run` (a run id at scale qwen3-0.6b) written to `run_dir`, from config.yaml with the
    scale's model replaced by `model_dir`; the change goes through an `overrides` entry, validated by the
    config schema as a user's would be, and the base model through the base_model step (model.json)."""
    config = copy.deepcopy(_yaml("config.yaml"))
    config["scales"][SCALE]["model"] = str(model_dir)
    tiny = next(o for o in config["overrides"] if o["match"] == {"scale": "tiny"})
    tasks = {}
    for name, entry in tiny["tasks"].items():  # the offline sources, a few problems each
        entry = copy.deepcopy(entry)
        entry["train"]["size"] = problems
        for spec in entry["eval"]:
            spec["size"] = 2
        tasks[name] = entry
    rid = parse_run_id(run)
    override = {
        "match": {"scale": SCALE},
        "resources": {"gpus": 0, "cpus": 1},
        "tasks": tasks,
        "training": {
            "max_steps": 1,
            "prompts_per_step": 1,
            "num_generations": 2,
            "max_completion_length": 4,
            "eval_problems": 1,
            "samples_per_eval": 1,
            "eval_every": 1,
            "save_every": 1,
            **(training or {}),
        },
    }
    if workflow_params:
        override["workflows"] = {rid.workflow: workflow_params}
    config["overrides"].append(override)
    validate_config(config, _yaml("rules/config.schema.yaml"))
    rc = resolve_run_config(config, rid)
    assert rc["model"]["name"] == str(model_dir) and rc["model"]["tiny"] is None  # the real-scale path
    info = build_base_model(base_model_spec(config, SCALE, [rid.task]), run_dir / "base" / "model.json")
    assert info["path"] == str(model_dir) and info["local"]
    return write_run_config(rc, info, run_dir)
