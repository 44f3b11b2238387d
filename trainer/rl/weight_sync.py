"""Verified weight sync between the trainer and a rollout engine, and the training-inference mismatch.

After every sync (and at sync 0, when the engine starts) `SyncVerifier.verify` decodes a fixed probe
prompt greedily with each policy in the engine and scores the PROBE_TOP_K most likely tokens at each
probe position with the trainer's forward, under the weights just synced (new) and those of the
previous sync (old, a CPU copy kept here). `sync_verdict` then asks what matters: is the engine
closer to the new weights than to the old ones (a stale adapter is not), and does it agree with the
new ones within a 16-bit engine's rounding (root-mean-square, not the largest difference: vLLM and
transformers differ per token by up to ~0.3 nats in bf16, vLLM issue 18352). Either failing stops
the run naming the policy and the step. `logp_mismatch` is the per-role mean |log p_engine -
log p_trainer| over a step's sampled tokens, each rank computing its share, logits only at the
completion positions, a bounded slice of them at a time in fp32. What a GPU engine's bf16
rounding gives is tested here by rule (simulated noise); it has not been measured on a GPU.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch

from trainer.models.chat import chat_prompt
from trainer.rl.distributed import Ranks
from trainer.rl.policies import PolicySet
from trainer.rl.update import Row, collate

PROBE_PROMPT = "Calculate 12 + 7. Give the answer in \\boxed{}."
PROBE_TOKENS = 32
PROBE_TOP_K = 5  # log-probs compared per probe position
# largest root-mean-square |log p_engine - log p_trainer| over the probe's log-probs: float32 kernels of
# two engines agree to ~1e-4 (the tiny Qwen3 on CPU); bf16 engines differ by ~0.09 rms (vLLM issue 18352)
AGREEMENT_RMS = {torch.float32: 2e-3, torch.bfloat16: 0.25, torch.float16: 0.15}
STALE_Z = 4.0  # the staleness test decides only where the update moved the probe this many noise SDs
LOGIT_POSITIONS = 4096  # completion positions whose logits one mismatch forward keeps (rows x longest)
SLICE_POSITIONS = 1024  # positions cast to float32 at once
MAX_ROWS = 32  # rows of one mismatch forward


class SyncError(RuntimeError):
    """The engine does not serve the trainer's weights after a sync."""


def sync_verdict(engine: torch.Tensor, new: torch.Tensor, old: torch.Tensor | None, dtype: torch.dtype) -> str | None:
    """Why the engine's log-probs (`engine`) do not show the trainer's `new` weights, or None.

    Staleness (when the `old` weights' log-probs are given): the engine's projection on the update,
    p = <engine - old, new - old> / |new - old|^2, is 1 for an engine serving the new weights and 0
    for one serving the old; below 1/2 it is closer to the old ones. Decided only where the update
    moved the probe by at least 2 x STALE_Z noise SDs (the noise: the engine's distance to the nearer
    of the two, per log-prob); an update too small to resolve is not called stale. Agreement: the
    rms difference to `new` within AGREEMENT_RMS of the model's dtype."""
    a, n = engine.double().flatten(), new.double().flatten()
    rms = float((a - n).pow(2).mean().sqrt())
    if old is not None:
        o = old.double().flatten()
        moved = float((n - o).norm())
        noise = min(float((a - n).norm()), float((a - o).norm())) / math.sqrt(len(a))
        proj = float((a - o) @ (n - o)) / moved**2 if moved > 0 else 1.0
        if moved > 0 and moved >= 2 * STALE_Z * noise and proj < 0.5:
            return (
                f"stale: its log-probs are closer to the weights before the update than after (projection "
                f"{proj:.2f} on the update; 1: the new weights, 0: the old)"
            )
    tol = AGREEMENT_RMS.get(dtype, AGREEMENT_RMS[torch.bfloat16])
    if rms > tol:
        return (
            f"rms |log p_engine - log p_trainer| = {rms:.4g} over the probe's {len(a)} log-probs, above the "
            f"tolerance {tol} for {dtype}"
        )
    return None


@contextlib.contextmanager
def swapped(params: list[torch.nn.Parameter], values: list[torch.Tensor]) -> Iterator[None]:
    """`params` hold `values` (moved to their devices) inside the block, their own tensors after it."""
    own = [p.data for p in params]
    try:
        for p, v in zip(params, values):
            p.data = v.to(device=p.device, dtype=p.dtype)
        yield
    finally:
        for p, v in zip(params, own):
            p.data = v


@torch.no_grad()
def probe_logps(
    model: torch.nn.Module, prompt: list[int], tokens: list[int], entries: list[tuple[int, int]]
) -> torch.Tensor:
    """The trainer's log-probs of (position, token) `entries` after `prompt` + `tokens`."""
    device = next(model.parameters()).device
    seq = torch.tensor([prompt + tokens], device=device)
    logits = model(input_ids=seq, logits_to_keep=len(tokens) + 1).logits[0, :-1].float()
    rows = torch.log_softmax(logits, dim=-1).cpu()
    return torch.tensor([float(rows[i, t]) for i, t in entries])


class SyncVerifier:
    """Verifies each sync of a VLLMEngine; keeps each policy's trainable weights on the CPU as of the last
    verified sync (LoRA: its adapter; finetune full: the whole model)."""

    def __init__(self, engine: Any, tokenizer: Any):
        self.engine, self.tokenizer = engine, tokenizer
        self.synced: dict[str, list[torch.Tensor]] = {}  # the old weights of the next sync

    def verify(self, step: int) -> dict[str, float]:
        """Probe every policy; raise SyncError naming the first whose engine log-probs fail sync_verdict.
        Returns policy -> rms |log p_engine - log p_trainer|."""
        from vllm import SamplingParams

        policies: PolicySet = self.engine.policies
        names = list(policies.policies)
        ids = self.tokenizer(chat_prompt(self.tokenizer, PROBE_PROMPT, False), add_special_tokens=False)["input_ids"]
        greedy = SamplingParams(temperature=0.0, max_tokens=PROBE_TOKENS, logprobs=PROBE_TOP_K, ignore_eos=True)
        gaps = {}
        for name, out in zip(names, self.engine.generate(names, [ids] * len(names), greedy)):
            o = out.outputs[0]
            entries = [(i, t) for i, d in enumerate(o.logprobs) for t in d]
            engine = torch.tensor([o.logprobs[i][t].logprob for i, t in entries])
            model, params = policies.model(name), policies.policies[name].params
            new = probe_logps(model, ids, list(o.token_ids), entries)
            old = None
            if name in self.synced:
                with swapped(params, self.synced[name]):
                    old = probe_logps(model, ids, list(o.token_ids), entries)
            gaps[name] = float((engine - new).pow(2).mean().sqrt())
            why = sync_verdict(engine, new, old, next(model.parameters()).dtype)
            if why is not None:
                raise SyncError(
                    f"step {step}: policy {name!r}: the engine does not serve the trainer's weights "
                    f"after the sync: {why}"
                )
        self.synced = {p.name: [x.detach().to("cpu", copy=True) for x in p.params] for p in policies}
        return gaps


def row_chunks(completion_lengths: list[int], positions: int) -> list[list[int]]:
    """Consecutive row indices grouped so that rows x longest completion + 1 <= `positions` (a longer row alone)."""
    chunks: list[list[int]] = []
    for i, _n in enumerate(completion_lengths):
        last = chunks[-1] if chunks else None
        if (
            last
            and len(last) < MAX_ROWS
            and (len(last) + 1) * (max(completion_lengths[j] for j in last + [i]) + 1) <= positions
        ):
            last.append(i)
        else:
            chunks.append([i])
    return chunks


@torch.no_grad()
def completion_logps(
    model: torch.nn.Module,
    prompts: list[list[int]],
    completions: list[list[int]],
    temperature: float = 1.0,
    positions: int = LOGIT_POSITIONS,
) -> list[torch.Tensor]:
    """Per row: the log-probs of its completion tokens under `model` (CPU float32).

    Prompts left-padded, completions right-padded (update.collate), logits kept at the completion
    positions alone (logits_to_keep), chunks of rows within `positions` kept positions, each row's
    logits cast to float32 SLICE_POSITIONS positions at a time: no full-vocabulary float32 tensor of
    the batch."""
    device = next(model.parameters()).device
    out: list[torch.Tensor] = [torch.empty(0)] * len(prompts)
    for chunk in row_chunks([len(c) for c in completions], positions):
        ids, attn, _ = collate([Row("", prompts[i], completions[i], 0.0, 0.0) for i in chunk], 0)
        width = max(len(completions[i]) for i in chunk)
        logits = model(input_ids=ids.to(device), attention_mask=attn.to(device), logits_to_keep=width + 1).logits
        for j, i in enumerate(chunk):
            tokens = torch.tensor(completions[i], device=device)
            parts = []
            for s in range(0, len(tokens), SLICE_POSITIONS):
                lg = logits[j, s : min(s + SLICE_POSITIONS, len(tokens))].float() / temperature
                parts.append(lg.gather(1, tokens[s : s + SLICE_POSITIONS, None])[:, 0] - torch.logsumexp(lg, dim=-1))
            out[i] = torch.cat(parts).cpu()
        del logits
    return out


def logp_mismatch(
    policies: PolicySet, turns: list[Any], temperature: float, ranks: Ranks | None = None
) -> dict[str, float]:
    """Per role: mean |log p_engine - log p_trainer| over the sampled tokens of `turns` (those whose
    completions carry the engine's log-probs), the trainer's weights being the sampling ones. `turns`
    are every rank's (the same list on each); each rank scores its share, the sums are reduced."""
    ranks = ranks or Ranks.single()
    roles = [r for p in policies for r in p.roles]
    mine = ranks.shard([t for t in turns if t.completion.completion_ids and getattr(t.completion, "logprobs", None)])
    sums = {r: [0.0, 0.0] for r in roles}
    for policy in policies:
        rows = [t for t in mine if t.role in policy.roles]
        if not rows:
            continue
        logps = completion_logps(
            policies.model(policy.name),
            [t.completion.prompt_ids for t in rows],
            [t.completion.completion_ids for t in rows],
            temperature,
        )
        for t, lp in zip(rows, logps):
            sums[t.role][0] += float((torch.tensor(t.completion.logprobs) - lp).abs().sum())
            sums[t.role][1] += len(lp)
    flat = ranks.sum_floats([x for r in roles for x in sums[r]])
    return {r: flat[2 * i] / flat[2 * i + 1] for i, r in enumerate(roles) if flat[2 * i + 1]}
