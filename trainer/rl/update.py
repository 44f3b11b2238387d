"""The policy update: one optimizer step of a policy on its own rows, and each role's share of its gradient.

Rows are grouped by role into micro-batches (so a leaf hook can attribute each backward pass's
gradient to one role; with `training.agent_gradients` by role and agent instance, agent_gradients.py), the GRPO token loss of grpo.py is aggregated by `loss_type`, gradients are
clipped per policy, and a step with a non-finite loss or gradient is skipped (its rows still
count in the logs). Without a KL term (beta 0) rows with zero advantage have exactly zero gradient
and are not back-propagated, only their entropy computed; rows that repeat a prompt share its
forward pass (grpo.per_token_logps_shared_prompts). In a data-parallel run each rank back-propagates its share of the rows, its
loss normalised by the whole batch's sizes, and the gradients (and each role's) are summed over
the ranks before the clip (trainer/rl/distributed.py), so every rank steps as one process would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from trainer.rl.agent_gradients import role_agent_metrics, row_agent
from trainer.rl.distributed import Ranks
from trainer.rl.grpo import (
    LOSS_AGGREGATIONS,
    BatchTotals,
    grpo_token_loss,
    per_token_logps,
    per_token_logps_shared_prompts,
    vllm_importance_sampling_ratio,
)
from trainer.rl.policies import Policy, PolicySet
from trainer.settings import TrainingSettings
from trainer.workflows import Turn


@dataclass
class Row:
    """One turn as a training sample of its policy."""

    role: str
    prompt_ids: list[int]
    completion_ids: list[int]
    advantage: float
    reward: float
    agent: int = 0  # the instance within a parallel role (voter k, worker k); 0 for other roles
    engine_logps: list[float] | None = None  # the rollout engine's log-prob of each completion token (vllm)


def policy_rows(policy: str, turns: list[Turn], routing: dict[str, str], parallel_role: str | None) -> list[Row]:
    """The training samples of `policy`: the turns of its roles (`routing`: role -> policy) that generated
    tokens, each with its agent where the role answers in parallel (`parallel_role`)."""
    return [
        Row(
            t.role,
            t.completion.prompt_ids,
            t.completion.completion_ids,
            t.advantage,
            t.reward,
            row_agent(t.role, t.agent, parallel_role),
            t.completion.logprobs,
        )
        for t in turns
        if routing[t.role] == policy and t.completion.completion_ids
    ]


class GradientRecorder:
    """Each role's share of a policy's gradient, from leaf hooks on role-grouped micro-batches.

    The backward pass of a micro-batch that holds one role's rows delivers exactly that role's
    gradient to each parameter's hook, so no extra backward pass is needed. With `agent` set (micro-
    batches of one agent instance each), the gradient is also summed per (role, agent).
    """

    def __init__(self, params: list[torch.nn.Parameter]):
        self.role: str | None = None
        self.agent: int | None = None  # None: no per-agent sums (training.agent_gradients off)
        self.grads: dict[str, list[torch.Tensor | None]] = {}
        self.agent_grads: dict[tuple[str, int], list[torch.Tensor | None]] = {}
        self.shapes = [p.shape for p in params]
        self.handles = [p.register_hook(self._hook(i, len(params))) for i, p in enumerate(params)]

    def _hook(self, i: int, n: int):
        def hook(grad: torch.Tensor) -> None:
            bufs = [self.grads.setdefault(self.role, [None] * n)]
            if self.agent is not None:
                bufs.append(self.agent_grads.setdefault((self.role, self.agent), [None] * n))
            for buf in bufs:
                buf[i] = grad.detach().float().clone() if buf[i] is None else buf[i] + grad.detach().float()

        return hook

    def reset(self) -> None:
        self.grads, self.agent_grads = {}, {}

    def add_zero(self, role: str, agent: int | None, params: list[torch.nn.Parameter]) -> None:
        """Count `role` (and its `agent`) as present with a zero gradient so far: what rows with zero
        advantage would have delivered through the hooks, had they been back-propagated."""
        keys = [(self.grads, role)] + ([(self.agent_grads, (role, agent))] if agent is not None else [])
        for store, key in keys:
            buf = store.setdefault(key, [None] * len(params))
            for i, p in enumerate(params):
                if buf[i] is None:
                    buf[i] = torch.zeros_like(p, dtype=torch.float32)

    def metrics(self) -> dict[str, dict[str, float]]:
        """Per role: norm of its gradient, its share of the summed squared norms, cosine with the others'."""
        flat = {
            r: torch.cat([g.flatten() for g in gs if g is not None]) if any(g is not None for g in gs) else None
            for r, gs in self.grads.items()
        }
        flat = {r: v for r, v in flat.items() if v is not None}
        sq = {r: float(v.pow(2).sum()) for r, v in flat.items()}
        total_sq = sum(sq.values())
        total = sum(flat.values()) if flat else None
        out = {}
        for r, v in flat.items():
            others = total - v
            denom = float(v.norm() * others.norm())
            out[r] = {
                "grad_norm": math.sqrt(sq[r]),
                "grad_sq_share": sq[r] / total_sq if total_sq > 0 else float("nan"),
                "grad_cos_others": float(v @ others) / denom if len(flat) > 1 and denom > 0 else float("nan"),
            }
        for r, m in role_agent_metrics(self.agent_grads, self.shapes).items():
            out.setdefault(r, {}).update(m)
        return out


def micro_batches(rows: list[Row], token_budget: int, by_agent: bool = False) -> list[list[Row]]:
    """Rows grouped by role (so gradients can be attributed), and by agent within a role when `by_agent`
    (agents in index order, rows in their order), chunked so rows x width <= budget."""
    batches = []
    groups = [
        (role, agent)
        for role in dict.fromkeys(r.role for r in rows)
        for agent in (sorted({r.agent for r in rows if r.role == role}) if by_agent else [None])
    ]
    for role, agent in groups:
        current: list[Row] = []
        for row in (r for r in rows if r.role == role and agent in (None, r.agent)):
            width = max([len(x.prompt_ids) + len(x.completion_ids) for x in current + [row]])
            if current and width * (len(current) + 1) > token_budget:
                batches.append(current)
                current = []
            current.append(row)
        if current:
            batches.append(current)
    return batches


def collate(rows: list[Row], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-padded prompts followed by right-padded completions: (input_ids, attention_mask, completion_mask)."""
    p_len = max(len(r.prompt_ids) for r in rows)
    c_len = max(len(r.completion_ids) for r in rows)
    ids = torch.full((len(rows), p_len + c_len), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    cmask = torch.zeros((len(rows), c_len), dtype=torch.float32)
    for i, r in enumerate(rows):
        p, c = len(r.prompt_ids), len(r.completion_ids)
        ids[i, p_len - p : p_len] = torch.tensor(r.prompt_ids)
        ids[i, p_len : p_len + c] = torch.tensor(r.completion_ids)
        attn[i, p_len - p : p_len + c] = 1
        cmask[i, :c] = 1
    return ids, attn, cmask


def collate_shared_prompts(
    rows: list[Row], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The rows' distinct prompts left-padded, each row's prompt index, and its completion right-padded:
    (prompt_ids, prompt_mask, prompt_of, completion_ids, completion_attention, completion_mask)."""
    distinct: dict[tuple[int, ...], int] = {}
    prompt_of = torch.tensor([distinct.setdefault(tuple(r.prompt_ids), len(distinct)) for r in rows])
    p_len = max(len(p) for p in distinct)
    c_len = max(len(r.completion_ids) for r in rows)
    prompt_ids = torch.full((len(distinct), p_len), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros_like(prompt_ids)
    for i, p in enumerate(distinct):
        prompt_ids[i, p_len - len(p) :] = torch.tensor(p)
        prompt_mask[i, p_len - len(p) :] = 1
    completion_ids = torch.full((len(rows), c_len), pad_id, dtype=torch.long)
    cmask = torch.zeros((len(rows), c_len), dtype=torch.float32)
    for i, r in enumerate(rows):
        completion_ids[i, : len(r.completion_ids)] = torch.tensor(r.completion_ids)
        cmask[i, : len(r.completion_ids)] = 1
    return prompt_ids, prompt_mask, prompt_of, completion_ids, cmask.long(), cmask


def repeats_prompts(rows: list[Row]) -> bool:
    """Whether some prompt stands in more than one row (a group's generations share theirs)."""
    return len({tuple(r.prompt_ids) for r in rows}) < len(rows)


STAT_KEYS = ("loss", "entropy", "kl", "clipped", "tokens")
IS_COLUMNS = ("importance_sampling_ratio_mean", "importance_sampling_ratio_min", "importance_sampling_ratio_max")


class PolicyUpdater:
    """Updates the policies of a PolicySet, one at a time, recording each role's gradient."""

    def __init__(
        self, policies: PolicySet, training: TrainingSettings, pad_id: int, device: str, ranks: Ranks | None = None
    ):
        self.policies, self.t, self.pad_id, self.device = policies, training, pad_id, device
        self.ranks = ranks or Ranks.single()
        self.recorders = {p.name: GradientRecorder(p.params) for p in policies}
        # TRL applies the correction only to vLLM's samples: the hf backend samples with the trainer's own weights
        self.correct = training.vllm_importance_sampling_correction and training.generation_backend == "vllm"
        self.first_pass = True  # the importance ratio's statistics: of the first pass over the rows only

    def logps(self, model: torch.nn.Module, batch: list[Row], with_entropy: bool = False):
        """(per-token log-probs, entropies or None, completion mask) of a micro-batch; rows that repeat
        a prompt share its forward pass (not under gradient checkpointing, which drops the KV cache)."""
        if repeats_prompts(batch) and not getattr(model, "is_gradient_checkpointing", False):
            *tensors, cmask = [x.to(self.device) for x in collate_shared_prompts(batch, self.pad_id)]
            logps, entropy = per_token_logps_shared_prompts(model, *tensors, self.t.temperature, with_entropy)
            return logps, entropy, cmask
        ids, attn, cmask = collate(batch, self.pad_id)
        ids, attn, cmask = ids.to(self.device), attn.to(self.device), cmask.to(self.device)
        logps, entropy = per_token_logps(model, ids, attn, cmask.shape[1], self.t.temperature, with_entropy)
        return logps, entropy, cmask

    def update(self, policy: Policy, rows: list[Row]) -> dict[str, dict[str, float]]:
        """One optimizer step of `policy` on its own rows (num_iterations passes); returns per-role metrics.

        Data-parallel: `rows` are this rank's share; every rank calls this for every policy."""
        stats: dict[str, dict[str, float]] = {}
        n_seq, n_tok = self.ranks.sum_floats([len(rows), sum(len(r.completion_ids) for r in rows)])  # all ranks'
        if not n_seq:
            return stats
        model = self.policies.model(policy.name)
        model.train()
        recorder = self.recorders[policy.name]
        recorder.reset()
        totals = BatchTotals(
            n_sequences=int(n_seq), n_tokens=int(n_tok), max_completion_length=self.t.max_completion_length
        )
        by_agent = self.t.agent_gradients
        # Without a KL term a row with zero advantage has exactly zero gradient: it is not back-
        # propagated, only its entropy (a logged statistic) is computed, without a graph.
        idle = [r for r in rows if self.t.beta == 0 and r.advantage == 0]
        batches = micro_batches(
            [r for r in rows if not (self.t.beta == 0 and r.advantage == 0)], self.t.micro_batch_tokens, by_agent
        )
        idle_batches = micro_batches(idle, self.t.micro_batch_tokens, by_agent)
        old_logps = None
        if self.t.num_iterations > 1:  # the sampling policy's log-probs, before any update
            with torch.no_grad():
                old_logps = [self.logps(model, b)[0] for b in batches]
        finite, grad_metrics = True, {}
        for it in range(self.t.num_iterations):
            self.first_pass = it == 0
            finite, grad_metrics = self._pass(policy, model, batches, idle_batches, old_logps, totals, stats, finite)
        self.ranks.reduce_role_stats(stats, policy.roles)  # the whole batch's loss terms
        if self.correct:
            self._reduce_ratio_stats(stats, policy.roles)
        for role, s in stats.items():
            s.update(grad_metrics.get(role, {}))
            s["skipped"] = not finite
        return stats

    def _pass(
        self,
        policy: Policy,
        model: torch.nn.Module,
        batches: list[list[Row]],
        idle_batches: list[list[Row]],
        old_logps: list[torch.Tensor] | None,
        totals: BatchTotals,
        stats: dict[str, dict[str, float]],
        finite: bool,
    ) -> tuple[bool, dict[str, dict[str, float]]]:
        """One pass over the rows: each micro-batch's backward (an idle one, of zero-advantage rows: entropy
        only; `old_logps`: the sampling policy's, or None), the gradients summed over ranks and clipped, then
        one optimizer and scheduler step, skipped where a loss or gradient is not finite (`finite`: so far).
        Returns (finite, each role's gradient metrics)."""
        by_agent = self.t.agent_gradients
        recorder = self.recorders[policy.name]
        policy.optimizer.zero_grad(set_to_none=True)
        recorder.reset()
        for bi, batch in enumerate(batches):
            s = stats.setdefault(batch[0].role, dict.fromkeys(STAT_KEYS, 0.0))
            recorder.role, recorder.agent = batch[0].role, batch[0].agent if by_agent else None
            finite &= self._backward(policy, model, batch, old_logps[bi] if old_logps else None, totals, s)
        for batch in idle_batches:
            s = stats.setdefault(batch[0].role, dict.fromkeys(STAT_KEYS, 0.0))
            recorder.add_zero(batch[0].role, batch[0].agent if by_agent else None, policy.params)
            finite &= self._entropy_only(model, batch, s)
        for p in policy.params:  # no row back-propagated: zeros, so Adam still steps (its momentum) as then
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        self.ranks.reduce_gradients(policy.params, recorder.grads, policy.roles)  # summed over ranks
        if by_agent:
            self.ranks.reduce_agent_gradients(policy.params, recorder.agent_grads)
        finite = self.ranks.all_true(finite)
        grad_metrics = recorder.metrics()
        total_norm = torch.nn.utils.clip_grad_norm_(policy.params, self.t.max_grad_norm)
        finite &= bool(torch.isfinite(total_norm))
        if finite:
            policy.optimizer.step()
        policy.optimizer.zero_grad(set_to_none=True)
        policy.scheduler.step()
        return finite, grad_metrics

    def _backward(
        self,
        policy: Policy,
        model: torch.nn.Module,
        batch: list[Row],
        old: torch.Tensor | None,
        totals: BatchTotals,
        s: dict[str, float],
    ) -> bool:
        """Loss and backward of one micro-batch, its sums added to `s`; whether the loss is finite."""
        logps, entropy, cmask = self.logps(model, batch, with_entropy=True)
        old = old if old is not None else logps.detach()
        ref = None
        if self.t.beta > 0:
            ref_model, ctx = self.policies.reference_logps_context(policy.name)
            with ctx, torch.no_grad():
                ref = self.logps(ref_model, batch)[0]
            self.policies.model(policy.name)
        adv = torch.tensor([r.advantage for r in batch], dtype=torch.float32, device=self.device)
        token = grpo_token_loss(
            logps, old, adv, self.t.epsilon, self.t.clip_high, self.t.beta, ref, self.t.use_bias_correction_kl
        )
        ratio = self._ratio(batch, old, cmask, s)
        loss = LOSS_AGGREGATIONS[self.t.loss_type](token.loss if ratio is None else token.loss * ratio, cmask, totals)
        finite = bool(torch.isfinite(loss))
        loss.backward()
        s["loss"] += float(loss.detach())
        s["entropy"] += float((entropy * cmask).sum())
        s["kl"] += float((token.kl * cmask).sum()) if token.kl is not None else float("nan")
        s["clipped"] += float((token.clipped.float() * cmask).sum())
        s["tokens"] += float(cmask.sum())
        return finite

    @torch.no_grad()
    def _entropy_only(self, model: torch.nn.Module, batch: list[Row], s: dict[str, float]) -> bool:
        """The statistics of a micro-batch of zero-advantage rows (beta = 0): its loss, clipped
        tokens and gradient are exactly zero, so only the entropy is computed; whether the
        log-probs are finite (as the loss of a back-propagated batch would show)."""
        logps, entropy, cmask = self.logps(model, batch, with_entropy=True)
        self._ratio(batch, logps, cmask, s)  # its statistics: TRL's cover every row
        s["entropy"] += float((entropy * cmask).sum())
        s["kl"] += float("nan")  # no KL term (beta = 0), as in _backward
        s["tokens"] += float(cmask.sum())
        return bool(torch.isfinite(logps).all())

    def _ratio(
        self, batch: list[Row], old: torch.Tensor, cmask: torch.Tensor, s: dict[str, float]
    ) -> torch.Tensor | None:
        """TRL's importance ratio of a micro-batch (grpo.vllm_importance_sampling_ratio) between the trainer's
        log-probs before the update (`old`) and the engine's; None when off or a row has no engine log-probs.
        Its sum, count, min and max (over completion tokens, or sequences in the sequence_* modes, as TRL
        logs it) go into `s` on the first pass."""
        if not self.correct or any(r.engine_logps is None for r in batch):
            return None
        engine = torch.zeros_like(cmask)
        for i, r in enumerate(batch):
            if len(r.engine_logps) != len(r.completion_ids):
                raise ValueError(
                    f"role {r.role}: {len(r.engine_logps)} engine log-probs for "
                    f"{len(r.completion_ids)} completion tokens"
                )
            engine[i, : len(r.engine_logps)] = torch.tensor(r.engine_logps, dtype=cmask.dtype)
        ratio = vllm_importance_sampling_ratio(
            old,
            engine,
            cmask,
            self.t.vllm_importance_sampling_mode,
            self.t.vllm_importance_sampling_clip_min,
            self.t.vllm_importance_sampling_clip_max,
        )
        flat = ratio.flatten() if ratio.shape[1] == 1 else ratio[cmask.bool()]
        if self.first_pass and flat.numel():
            s["is_sum"] = s.get("is_sum", 0.0) + float(flat.sum())
            s["is_n"] = s.get("is_n", 0.0) + flat.numel()
            s["is_min"] = min(s.get("is_min", math.inf), float(flat.min()))
            s["is_max"] = max(s.get("is_max", -math.inf), float(flat.max()))
        return ratio

    def _reduce_ratio_stats(self, stats: dict[str, dict[str, float]], roles: list[str]) -> None:
        """Each role's importance-ratio mean, min and max over every rank's rows (train.parquet's IS_COLUMNS)."""
        sums = self.ranks.sum_floats([stats.get(r, {}).get(k, 0.0) for r in roles for k in ("is_sum", "is_n")])
        bounds = self.ranks.all_gather(
            [(stats.get(r, {}).get("is_min", math.inf), stats.get(r, {}).get("is_max", -math.inf)) for r in roles]
        )
        for i, role in enumerate(roles):
            if role in stats and sums[2 * i + 1] > 0:
                mine = bounds[i :: len(roles)]  # this role's (min, max) on each rank
                stats[role].update(
                    dict(
                        zip(
                            IS_COLUMNS,
                            (sums[2 * i] / sums[2 * i + 1], min(b[0] for b in mine), max(b[1] for b in mine)),
                        )
                    )
                )
