"""A stage far over its KV-cache budget is generated in chunks.

On a small random Qwen3 (LoRA policies, as a run has), greedy outputs of a chunked call equal the
unchunked call's token for token and in input order; the number of chunks follows the budget; and
every chunk's KV cache and logits, estimated HERE from the model config (layers x KV heads x head dim x
K/V x dtype bytes x rows x (longest prompt + max_new_tokens), plus rows x 4 float32 copies of the
vocabulary), stays under the budget. The chunks are
seen by spying on the real Hugging Face `generate`; the stage is still one logical call.
"""

from __future__ import annotations

import math

import pytest
from transformers.generation.utils import GenerationMixin

from tests.local_qwen3 import small_vocab_tokenizer
from trainer.contract.config import ConfigError
from trainer.models.base_model import build_tiny_model
from trainer.models.chat import chat_prompt
from trainer.rl.policies import PolicySet
from trainer.rl.rollout import HFGenerator
from trainer.settings import TrainingSettings, from_dict

MAX_NEW = 6
TRAINING = from_dict(
    TrainingSettings,
    {
        "finetune": "lora",
        "lora": {"r": 4, "lora_alpha": 8},
        "max_steps": 1,
        "learning_rate": 1e-3,
        "lr_scheduler_type": "constant",
    },
    "training",
)
# prompts of many lengths, not sorted: the chunks must sort them and put the results back
PROMPTS = [f"Calculate {a} + {b}." + " Then add 1." * (a % 5) for a, b in zip(range(7, 40, 3), range(11))] * 2


@pytest.fixture(scope="module")
def setup():
    tok = small_vocab_tokenizer()
    arch = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    }
    base = build_tiny_model(arch, 0, vocab_size=len(tok), eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    return tok, PolicySet(base, {"generator": "shared"}, TRAINING)


def kv_bytes(config, rows: int, tokens: int) -> int:
    """The test's own estimate: float32 K and V per layer, per KV head, per head dimension, and each row's
    decode-step logits (float32 over the vocabulary: the logits, scores, probabilities and top-p sort)."""
    head_dim = config.hidden_size // config.num_attention_heads
    kv = config.num_hidden_layers * config.num_key_value_heads * head_dim * 2 * 4 * rows * tokens
    return kv + rows * 4 * config.vocab_size * 4


def run(setup, monkeypatch, memory_gb: float) -> tuple[HFGenerator, list, list[tuple[int, int]]]:
    """One greedy call of the whole stage; (generator, completions, (rows, prompt width) of each real generate)."""
    tok, policies = setup
    shapes, depth = [], []
    real = GenerationMixin.generate

    def spy(model, *args, **kwargs):
        if not depth:  # the outermost call only
            shapes.append(tuple(kwargs["input_ids"].shape))
        depth.append(1)
        try:
            return real(model, *args, **kwargs)
        finally:
            depth.pop()

    monkeypatch.setattr(GenerationMixin, "generate", spy)
    gen = HFGenerator(policies, tok, max_new_tokens=MAX_NEW, temperature=0.0, generation_memory_gb=memory_gb)
    out = gen("generator", PROMPTS)
    monkeypatch.setattr(GenerationMixin, "generate", real)
    return gen, out, shapes


def test_chunked_greedy_generation_equals_unchunked_and_fits_the_budget(setup, monkeypatch):
    tok, policies = setup
    config = policies.model("shared").config
    lengths = [len(tok(chat_prompt(tok, p, False), add_special_tokens=False)["input_ids"]) for p in PROMPTS]
    assert len(set(lengths)) > 3  # the stage really mixes prompt lengths

    whole, whole_out, whole_shapes = run(setup, monkeypatch, memory_gb=64.0)
    assert (whole.calls, whole.chunks, len(whole_shapes)) == (1, 1, 1)

    per_row_max = kv_bytes(config, 1, max(lengths) + MAX_NEW)
    for rows_fitting in (4, 2):  # a budget of about 4, then 2, of the longest rows: far under the stage's need
        budget_gb = rows_fitting * per_row_max / 2**30
        gen, out, shapes = run(setup, monkeypatch, memory_gb=budget_gb)
        # one logical call, several real generate calls, counted as chunks
        assert gen.calls == 1 and gen.chunks == len(shapes) > 1
        # every chunk under the budget, estimated from the model config
        for rows, width in shapes:
            assert kv_bytes(config, rows, width + MAX_NEW) <= budget_gb * 2**30, (rows, width)
        # the chunk count follows the budget: at least the stage's total need over the budget, at most one per
        # `rows_fitting` rows of the longest (sorted greedy packing fills each chunk before the next)
        need = sum(kv_bytes(config, 1, n + MAX_NEW) for n in lengths)
        assert math.ceil(need / (budget_gb * 2**30)) <= gen.chunks <= math.ceil(len(PROMPTS) / rows_fitting)
        # prompts sorted by length: widths never shrink from one chunk to the next
        assert [w for _, w in shapes] == sorted(w for _, w in shapes)
        # token for token, in input order
        assert [c.completion_ids for c in out] == [c.completion_ids for c in whole_out]
        assert [c.prompt_ids for c in out] == [c.prompt_ids for c in whole_out]
        assert [len(c.prompt_ids) for c in out] == lengths
    assert len(shapes) > len(whole_shapes)


def test_a_budget_below_one_sequence_is_a_named_error(setup):
    tok, policies = setup
    gen = HFGenerator(policies, tok, max_new_tokens=MAX_NEW, temperature=0.0, generation_memory_gb=1e-9)
    with pytest.raises(ConfigError, match="training.generation_memory_gb"):
        gen("generator", PROMPTS[:2])


def test_rows_keep_input_order_within_a_chunk():
    """A stage that fits in one chunk is the unchunked call itself (same rows, same order: sampling
    draws the same tokens as before chunking existed); across chunks, shorter prompts come first."""
    from trainer.rl.rollout import plan_chunks

    lengths = [9, 3, 7, 3, 5]
    assert plan_chunks(lengths, 4, 1, 10**6) == [[0, 1, 2, 3, 4]]
    chunks = plan_chunks(lengths, 4, 1, 2 * 11)  # two rows of width <= 11 per chunk
    assert chunks == [[1, 3], [2, 4], [0]]
    assert all(c == sorted(c) for c in chunks)


def test_repeated_prompts_are_prefilled_once_with_the_same_greedy_outputs(setup, monkeypatch):
    """A stage repeats each prompt (num_generations, n_votes): the prompts' cache is computed once per
    distinct prompt and shared, and greedy outputs equal those of prefilling every row."""
    import torch

    from trainer.rl import rollout

    tok, policies = setup
    model = policies.model("shared")
    widths: list[tuple[int, int]] = []  # (rows, tokens) of each forward pass
    hook = model.get_base_model().register_forward_pre_hook(
        lambda mod, args, kwargs: widths.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    try:
        gen = HFGenerator(policies, tok, max_new_tokens=MAX_NEW, temperature=0.0)
        shared = gen("generator", PROMPTS)  # every prompt twice
        shared_widths, widths[:] = list(widths), []
        monkeypatch.setattr(rollout, "shared_prompt_cache", lambda *args: None)
        alone = gen("generator", PROMPTS)
        alone_widths = list(widths)
    finally:
        hook.remove()
    distinct = len(set(PROMPTS))
    assert distinct == len(PROMPTS) // 2
    width = max(len(c.prompt_ids) for c in shared)
    # with the shared cache: one prefill of the distinct prompts (all but their last token), then
    # every row's last prompt token, then one token at a time
    assert shared_widths[0] == (distinct, width - 1) and shared_widths[1] == (len(PROMPTS), 1)
    assert alone_widths[0] == (len(PROMPTS), width)
    assert [c.completion_ids for c in shared] == [c.completion_ids for c in alone]
    assert any(c.completion_ids for c in shared)
    # prompts that never repeat take the usual path
    ids = torch.tensor([[3, 4, 5], [3, 4, 6]])
    assert rollout.shared_prompt_cache(model, ids, torch.ones_like(ids)) is None
