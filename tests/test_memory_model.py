"""The memory model (trainer/models/memory.py): its formulas at Qwen3-0.6B's shape, and the HF
backend's chunk budget is that model (KV cache and each row's decode-step logits), not the KV cache alone.
benchmarks/bench_memory_model.py measures the same formulas at real width (docs/benchmarks.md)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from trainer.models import memory
from trainer.rl import rollout

QWEN3_06B = {
    "vocab_size": 151936,
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
}


def test_the_formulas_at_qwen3_0_6b():
    kv = 28 * 8 * 128 * 2 * 2  # layers x KV heads x head dim x K and V x bf16
    assert memory.kv_bytes_per_token(QWEN3_06B, 2) == kv == 114688
    assert memory.kv_bytes_per_token(SimpleNamespace(**QWEN3_06B), 2) == kv  # a transformers config too
    logits_row = memory.GENERATE_LOGITS_COPIES * 151936 * 4
    assert memory.rollout_chunk_bytes(QWEN3_06B, 2, 16, 5120 + 512) == 16 * (5632 * kv + logits_row)
    # the update's logits: rows x completion positions x vocabulary x float32, and their copies
    small = memory.update_bytes(QWEN3_06B, 2, 2, 1024, 512, trained_params=0)
    more = memory.update_bytes(QWEN3_06B, 2, 2, 1024, 768, trained_params=0)
    assert more - small == memory.UPDATE_LOGITS_COPIES * 2 * 256 * 151936 * 4
    # under gradient checkpointing a layer's input per token and layer is kept, not every activation
    assert memory.update_bytes(QWEN3_06B, 2, 2, 1024, 512, checkpointing=False) > 2 * small
    # the prefill keeps the last position's logits only; its KV cache indexed out to every row
    assert memory.prefill_bytes(QWEN3_06B, 2, 1, 8, 256) >= 8 * 256 * kv


def test_the_chunk_budget_is_the_memory_models(monkeypatch):
    """HFGenerator chunks a stage so that each chunk's rollout_chunk_bytes (KV cache and logits) fits."""
    seen = {}

    def spy(lengths, max_new, per_token, budget, row_bytes=0):
        seen.update(per_token=per_token, budget=budget, row_bytes=row_bytes)
        return rollout.plan_chunks.__wrapped__(lengths, max_new, per_token, budget, row_bytes)

    spy.__wrapped__ = rollout.plan_chunks
    monkeypatch.setattr(rollout, "plan_chunks", spy)
    monkeypatch.setattr(rollout, "chat_prompt", lambda tok, p, thinking: p)
    model = SimpleNamespace(config=SimpleNamespace(**QWEN3_06B), parameters=lambda: iter([torch.zeros(1)]))
    gen = rollout.HFGenerator.__new__(rollout.HFGenerator)
    gen.__dict__.update(
        policies=SimpleNamespace(model=lambda name: model, routing={"generator": "shared"}),
        tokenizer=lambda texts, add_special_tokens: {"input_ids": [[1] * len(t) for t in texts]},
        max_new_tokens=64,
        enable_thinking=False,
        device="cpu",
        memory_gb=0.05,
        calls=0,
        chunks=0,
    )
    monkeypatch.setattr(gen, "_generate", lambda model, ids: [None] * len(ids), raising=False)
    prompts = ["x" * n for n in (30, 10, 20, 40, 25, 15)]
    gen("generator", prompts)
    assert seen["per_token"] == memory.kv_bytes_per_token(QWEN3_06B, 4)  # float32 parameters
    assert seen["row_bytes"] == memory.generation_row_bytes(QWEN3_06B) > 0
    chunks = rollout.plan_chunks.__wrapped__(
        [len(p) for p in prompts], 64, seen["per_token"], seen["budget"], seen["row_bytes"]
    )
    assert gen.chunks == len(chunks) > 1
    for chunk in chunks:
        width = max(len(prompts[i]) for i in chunk) + 64
        assert memory.rollout_chunk_bytes(QWEN3_06B, 4, len(chunk), width) <= seen["budget"]
