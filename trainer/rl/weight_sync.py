"""Verified weight sync between the trainer and a rollout engine, and the training-inference mismatch.

After every sync, `verify_sync` decodes a fixed probe prompt greedily with each policy in the engine
and scores the engine's tokens with the trainer's own forward: every engine token must be the
trainer's greedy choice (or within the tolerance of it, for near ties) and every log-prob must agree
within the tolerance, else the run stops naming the policy and the step. A silent sync failure
(an adapter served stale) would otherwise train on samples of a policy that no longer exists.
`logp_mismatch` is the per-role mean |log p_engine - log p_trainer| over a step's sampled tokens.
"""

from __future__ import annotations

from typing import Any

import torch

from trainer.rl.chat import chat_prompt
from trainer.rl.policies import PolicySet

PROBE_PROMPT = "Calculate 12 + 7. Give the answer in \\boxed{}."
PROBE_TOKENS = 8
PROBE_TOP_K = 5  # log-probs compared per probe position
# largest |log p_engine - log p_trainer| accepted on a probe token: float32 kernels of two engines
# agree to ~1e-4 (measured on the tiny Qwen3 on CPU); 16-bit weights round to ~1e-2
SYNC_TOLERANCE = {torch.float32: 2e-3, torch.bfloat16: 0.1, torch.float16: 0.05}


class SyncError(RuntimeError):
    """The engine does not serve the trainer's weights after a sync."""


@torch.no_grad()
def trainer_logps(model: torch.nn.Module, prompts: list[list[int]], completions: list[list[int]],
                  temperature: float = 1.0) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per row: log-probs of the completion tokens under `model`, and the best log-prob at each position."""
    device = next(model.parameters()).device
    width = max(len(p) + len(c) for p, c in zip(prompts, completions))
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, (p, c) in enumerate(zip(prompts, completions)):  # right padding: positions start at 0 per row
        ids[i, :len(p) + len(c)] = torch.tensor(p + c)
        mask[i, :len(p) + len(c)] = 1
    logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float() / temperature
    logp = torch.log_softmax(logits, dim=-1)
    chosen, best = [], []
    for i, (p, c) in enumerate(zip(prompts, completions)):
        rows = logp[i, len(p) - 1:len(p) + len(c) - 1]
        chosen.append(rows.gather(1, torch.tensor(c, device=device)[:, None])[:, 0].cpu())
        best.append(rows.max(dim=1).values.cpu())
    return chosen, best


def verify_sync(engine: Any, tokenizer: Any, step: int) -> dict[str, float]:
    """Probe every policy in `engine` (a VLLMEngine); raise SyncError naming the first that differs.

    Compares the PROBE_TOP_K most likely tokens' log-probs at every probe position, not only the chosen
    token's: a peaked model gives its greedy token log p ~ 0 under any nearby weights, the others move.
    Returns policy -> max |log p difference|."""
    from vllm import SamplingParams

    policies: PolicySet = engine.policies
    names = list(policies.policies)
    ids = tokenizer(chat_prompt(tokenizer, PROBE_PROMPT, False), add_special_tokens=False)["input_ids"]
    greedy = SamplingParams(temperature=0.0, max_tokens=PROBE_TOKENS, logprobs=PROBE_TOP_K, ignore_eos=True)
    gaps = {}
    for name, out in zip(names, engine.generate(names, [ids] * len(names), greedy)):
        o = out.outputs[0]
        tokens = list(o.token_ids)
        model = policies.model(name)
        tol = SYNC_TOLERANCE.get(next(model.parameters()).dtype, 0.1)
        with torch.no_grad():
            seq = torch.tensor([ids + tokens], device=next(model.parameters()).device)
            rows = torch.log_softmax(model(input_ids=seq).logits[0, len(ids) - 1:-1].float(), dim=-1).cpu()
        gap = max(abs(lp.logprob - float(rows[i, t])) for i, d in enumerate(o.logprobs) for t, lp in d.items())
        chosen = rows[torch.arange(len(tokens)), torch.tensor(tokens)]
        not_greedy = float((rows.max(dim=1).values - chosen).max())  # > tol: the trainer picks another token
        gaps[name] = gap
        if gap > tol or not_greedy > tol:
            raise SyncError(f"step {step}: policy {name!r}: the engine does not serve the trainer's weights after "
                            f"the sync (probe: max |log p_engine - log p_trainer| = {gap:.4g} over the top "
                            f"{PROBE_TOP_K} tokens, engine tokens {'not ' if not_greedy > tol else ''}the "
                            f"trainer's greedy choice; tolerance {tol})")
    return gaps


def logp_mismatch(policies: PolicySet, turns: list[Any], temperature: float) -> dict[str, float]:
    """Per role: mean |log p_engine - log p_trainer| over the sampled tokens of `turns` (those whose
    completions carry the engine's log-probs), the trainer's weights being the sampling ones."""
    sums: dict[str, list[float]] = {}
    for policy in policies:
        mine = [t for t in turns if t.role in policy.roles and t.completion.completion_ids
                and getattr(t.completion, "logprobs", None)]
        for start in range(0, len(mine), 32):  # bounded forward batches
            batch = mine[start:start + 32]
            chosen, _ = trainer_logps(policies.model(policy.name), [t.completion.prompt_ids for t in batch],
                                      [t.completion.completion_ids for t in batch], temperature)
            for t, lp in zip(batch, chosen):
                diff = (torch.tensor(t.completion.logprobs) - lp).abs()
                acc = sums.setdefault(t.role, [0.0, 0.0])
                acc[0] += float(diff.sum())
                acc[1] += len(diff)
    return {role: s / n for role, (s, n) in sums.items() if n}
