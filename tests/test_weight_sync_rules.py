"""The vLLM backend's GPU rules for the training-inference checks, checked on CPU.

- memory: `logp_mismatch` at the real Qwen3 vocabulary (151,936) allocates no tensor above a cap that
  the full-sequence, full-vocabulary float32 logits of the batch exceed (the largest tensor any torch op
  produces, seen by a dispatch mode), gives the same values, and scores only this rank's share of the
  rows, the sums reduced over ranks;
- the sync criterion passes an engine whose log-probs are the new weights' plus bf16-scale
  noise (up to 0.3 per log-prob, what vLLM and transformers differ by in bf16, vLLM issue 18352) and
  stops one that serves the old weights; an update too small to resolve under the noise is not called
  stale, and a wrong model (far from both) fails the agreement test, at sync 0 too; end to end, the
  verifier (over a stand-in engine decoding with the trainer's own tiny model) passes sync 0 and a
  fresh sync and stops an engine serving an adapter of the previous sync, naming policy and step.
A GPU engine's real bf16 differences are simulated here, not measured.
"""

from __future__ import annotations

import contextlib
import math
import sys
from types import SimpleNamespace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from trainer.models.base_model import build_tiny_model
from trainer.rl import weight_sync
from trainer.rl.distributed import Ranks
from trainer.rl.policies import PolicySet
from trainer.rl.weight_sync import logp_mismatch
from trainer.settings import TrainingSettings, from_dict

QWEN3_VOCAB = 151_936
ROWS, PROMPT, COMPLETION = 4, 100, 20  # the old code's logits: 4 x 120 x 151,936 float32 = 291 MB
CAP = 64 * 2**20  # bytes: the completion positions' logits of the batch (4 x 21 x 151,936 x 4 = 51 MB) fit


class LargestTensor(TorchDispatchMode):
    """Records the largest storage any torch op returns inside the block."""

    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.bytes = max(self.bytes, t.untyped_storage().nbytes())
        return out


@pytest.fixture(scope="module")
def real_vocab_policies():
    """A one-layer Qwen3 with the real vocabulary and a small hidden size, one LoRA policy per role."""
    arch = {
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
    }
    base = build_tiny_model(arch, 0, vocab_size=QWEN3_VOCAB, eos_token_id=1, pad_token_id=0)
    t = from_dict(TrainingSettings, {"lora": {"r": 4, "lora_alpha": 8}, "max_steps": 1}, "training")
    return PolicySet(base, {"generator": "generator", "aggregator": "aggregator"}, t)


def reference_logps(model, prompt: list[int], completion: list[int], temperature: float) -> torch.Tensor:
    """The completion's log-probs from the whole row's full-vocabulary log-softmax (one row: no padding)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + completion])).logits[0].float() / temperature
        rows = torch.log_softmax(logits, dim=-1)[len(prompt) - 1 : -1]
    return rows.gather(1, torch.tensor(completion)[:, None])[:, 0]


@pytest.fixture(scope="module")
def exact_turns(real_vocab_policies) -> list[tuple[str, list[int], list[int], torch.Tensor]]:
    """ROWS random turns per role and the trainer's log-probs of their completions at temperature 0.7."""
    g = torch.Generator().manual_seed(0)
    out = []
    for role in ("generator", "aggregator"):
        for _ in range(ROWS):
            p = torch.randint(2, QWEN3_VOCAB, (PROMPT,), generator=g).tolist()
            c = torch.randint(2, QWEN3_VOCAB, (COMPLETION,), generator=g).tolist()
            out.append((role, p, c, reference_logps(real_vocab_policies.model(role), p, c, 0.7)))
    return out


def turns(exact, shift: float = 0.0) -> list[SimpleNamespace]:
    """The turns, their engine log-probs the trainer's own plus `shift`."""
    return [
        SimpleNamespace(
            role=role, completion=SimpleNamespace(prompt_ids=p, completion_ids=c, logprobs=(lp + shift).tolist())
        )
        for role, p, c, lp in exact
    ]


def test_logp_mismatch_at_the_real_vocabulary_stays_under_a_memory_cap(real_vocab_policies, exact_turns):
    rows = turns(exact_turns, shift=0.25)
    with LargestTensor() as seen:
        mismatch = logp_mismatch(real_vocab_policies, rows, 0.7)
    assert seen.bytes <= CAP, f"largest tensor {seen.bytes / 2**20:.0f} MiB, cap {CAP / 2**20:.0f} MiB"
    assert mismatch == pytest.approx({"generator": 0.25, "aggregator": 0.25}, abs=1e-4)


def test_logp_mismatch_slices_rows_and_positions_under_a_budget(real_vocab_policies, exact_turns, monkeypatch):
    """With a budget of 2 rows of kept positions and slices of 8 positions, the values stay the same."""
    monkeypatch.setattr(weight_sync, "SLICE_POSITIONS", 8)
    rows = turns(exact_turns)
    gen = [t for t in rows if t.role == "generator"]
    with LargestTensor() as seen:
        got = weight_sync.completion_logps(
            real_vocab_policies.model("generator"),
            [t.completion.prompt_ids for t in gen],
            [t.completion.completion_ids for t in gen],
            0.7,
            positions=2 * (COMPLETION + 1),
        )
    assert seen.bytes <= 2 * (COMPLETION + 1) * QWEN3_VOCAB * 4
    for t, lp in zip(gen, got):
        assert torch.allclose(lp, torch.tensor(t.completion.logprobs), atol=1e-4)
    assert weight_sync.row_chunks([3, 9, 2, 2, 40], 24) == [[0, 1], [2, 3], [4]]


class HalfRanks(Ranks):
    """Rank `rank` of two, its sums reduced with `other`'s (what an all-reduce over two ranks returns)."""

    def __init__(self, rank: int, other: list[float] | None = None):
        super().__init__(rank, 2, rank)
        object.__setattr__(self, "other", other)
        object.__setattr__(self, "sent", None)

    def sum_floats(self, values: list[float]) -> list[float]:
        object.__setattr__(self, "sent", list(values))
        return [a + b for a, b in zip(values, self.other)] if self.other is not None else list(values)


def test_logp_mismatch_scores_this_ranks_share_and_reduces_the_sums(real_vocab_policies, exact_turns, monkeypatch):
    rows = turns(exact_turns, shift=-0.5)
    for i, t in enumerate(rows):  # a different mismatch per row: the shares must add up to the whole
        t.completion.logprobs = [x - 0.01 * i for x in t.completion.logprobs]
    whole = logp_mismatch(real_vocab_policies, rows, 0.7)
    scored = []
    real = weight_sync.completion_logps
    monkeypatch.setattr(
        weight_sync,
        "completion_logps",
        lambda model, p, c, *a, **k: scored.append(len(p)) or real(model, p, c, *a, **k),
    )
    second = HalfRanks(1)
    logp_mismatch(real_vocab_policies, rows, 0.7, second)
    assert sum(scored) == len(rows) // 2  # rank 1 scored its half alone
    first = logp_mismatch(real_vocab_policies, rows, 0.7, HalfRanks(0, second.sent))
    assert sum(scored) == len(rows)
    assert first == pytest.approx(whole, abs=1e-5)


# -- the sync criterion ---------------------------------------------------------------------------

PROBE = weight_sync.PROBE_TOKENS * weight_sync.PROBE_TOP_K


def probe_logps(seed: int, update_sd: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(old, new) log-probs of a probe: top-5 log-probs per position, the update moving each by ~update_sd."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(PROBE, generator=g, dtype=torch.float64) * 8
    return old, old + update_sd * torch.randn(PROBE, generator=g, dtype=torch.float64)


def bf16_noise(seed: int) -> torch.Tensor:
    """What a bf16 engine adds to the trainer's log-probs: uniform, up to 0.3 per log-prob."""
    g = torch.Generator().manual_seed(1000 + seed)
    return (torch.rand(PROBE, generator=g, dtype=torch.float64) * 2 - 1) * 0.3


@pytest.mark.parametrize("seed", range(20))
def test_sync_criterion_passes_a_bf16_noised_fresh_adapter_and_stops_a_stale_one(seed):
    old, new = probe_logps(seed, update_sd=0.15)
    noise = bf16_noise(seed)
    assert float(noise.abs().max()) > 0.1  # the former rule (max |delta| <= 0.1 in bf16) stopped this engine
    assert weight_sync.sync_verdict(new + noise, new, old, torch.bfloat16) is None
    why = weight_sync.sync_verdict(old + noise, new, old, torch.bfloat16)
    assert why is not None and why.startswith("stale")


def test_sync_criterion_leaves_an_unresolvable_update_alone_and_stops_a_wrong_model():
    old, new = probe_logps(0, update_sd=0.005)  # far below the noise: cannot tell, not stale
    assert weight_sync.sync_verdict(old + bf16_noise(0), new, old, torch.bfloat16) is None
    wrong = new + 1.0 * torch.randn(PROBE, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    assert "rms" in weight_sync.sync_verdict(wrong, new, old, torch.bfloat16)
    assert "rms" in weight_sync.sync_verdict(wrong, new, None, torch.bfloat16)  # sync 0: no old weights
    assert weight_sync.sync_verdict(new + bf16_noise(1), new, None, torch.bfloat16) is None
    # float32 engines agree to ~1e-4: the bf16 noise there is a fault
    assert weight_sync.sync_verdict(new + bf16_noise(1), new, None, torch.float32) is not None
    assert weight_sync.sync_verdict(new + 1e-5, new, old, torch.float32) is None
    assert weight_sync.sync_verdict(old, new, old, torch.float32).startswith("stale")
    assert math.isfinite(float(new.sum()))


# -- the verifier end to end: a stand-in engine over the trainer's own tiny model -----------------------


class StandInEngine:
    """What SyncVerifier reads of a VLLMEngine: its policies, and `generate` decoding greedily with each
    policy under the weights it serves (`served`: policy -> weights; absent: the trainer's current ones),
    returning the top-k log-probs per position plus `noise`; `decode_with`: another PolicySet decodes."""

    def __init__(self, policies, noise: float = 0.0, decode_with=None):
        self.policies, self.noise, self.served, self.decoder = policies, noise, {}, decode_with or policies

    @torch.no_grad()
    def generate(self, names, prompts, sampling):
        outs = []
        for name, ids in zip(names, prompts):
            model, params = self.decoder.model(name), self.decoder.policies[name].params
            ctx = weight_sync.swapped(params, self.served[name]) if name in self.served else contextlib.nullcontext()
            tokens, logprobs = [], []
            with ctx:
                for _ in range(sampling.max_tokens):
                    lp = torch.log_softmax(model(input_ids=torch.tensor([ids + tokens])).logits[0, -1].float(), -1)
                    top = torch.topk(lp, sampling.logprobs)
                    logprobs.append(
                        {
                            int(t): SimpleNamespace(logprob=float(v) + self.noise * (-1) ** len(tokens))
                            for v, t in zip(top.values, top.indices)
                        }
                    )
                    tokens.append(int(top.indices[0]))
            outs.append(SimpleNamespace(outputs=[SimpleNamespace(token_ids=tokens, logprobs=logprobs)]))
        return outs


class ProbeTokenizer:
    def apply_chat_template(self, messages, **kwargs):
        return messages[0]["content"]

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [3 + ord(ch) % 50 for ch in text[:12]]}


def test_the_verifier_checks_sync_0_and_stops_a_stale_adapter_naming_policy_and_step(monkeypatch):
    from tests.test_routing import tiny_qwen3

    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(SamplingParams=lambda **k: SimpleNamespace(**k)))
    t = from_dict(TrainingSettings, {"lora": {"r": 4, "lora_alpha": 8}, "max_steps": 1}, "training")
    policies = PolicySet(tiny_qwen3(0), {"generator": "generator", "aggregator": "aggregator"}, t)
    engine = StandInEngine(policies, noise=1e-4)  # float32 engines agree to ~1e-4
    verifier = weight_sync.SyncVerifier(engine, ProbeTokenizer())
    assert max(verifier.verify(0).values()) < 2e-3  # sync 0: the starting weights
    for step in (1, 2):
        with torch.no_grad():  # an update that moves every adapter
            for x in (x for p in policies for x in p.params):
                x.add_(0.3 * torch.randn_like(x))
        if step == 2:  # the engine keeps serving the aggregator's weights of sync 1
            engine.served["aggregator"] = verifier.synced["aggregator"]
            with pytest.raises(weight_sync.SyncError, match=r"step 2: policy 'aggregator': .* stale"):
                verifier.verify(step)
        else:
            verifier.verify(step)
    wrong = StandInEngine(policies, decode_with=PolicySet(tiny_qwen3(1), policies.routing, t))  # another model
    with pytest.raises(weight_sync.SyncError, match=r"step 0: policy 'generator': .* rms"):
        weight_sync.SyncVerifier(wrong, ProbeTokenizer()).verify(0)
