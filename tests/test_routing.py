"""Policy routing and per-role gradient metrics.

On a tiny random Qwen3 (built offline): under `shared` one optimizer gets gradient from every
role's rows; under `isolated` (and a custom grouping) an update of one policy leaves every other
policy's trainable parameters bit-identical, with its own scheduler and clipping; the per-role
gradient norms that `Trainer.update` records equal those of separate backward passes of each
role's loss alone, and the shares sum to 1 on a shared policy.
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from trainer.models.base_model import build_tiny_model
from trainer.rl import update as train_mod
from trainer.rl.grpo import LOSS_AGGREGATIONS, BatchTotals, grpo_token_loss, per_token_logps
from trainer.rl.policies import PolicySet, routing_table
from trainer.rl.update import PolicyUpdater, Row, collate
from trainer.settings import TrainingSettings, from_dict

VOCAB, PAD = 64, 0
ARCH = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}
TOL = 1e-5


def tiny_qwen3(seed: int = 0) -> torch.nn.Module:
    """A random two-layer Qwen3 small enough for many updates per test on CPU."""
    return build_tiny_model(ARCH, seed, vocab_size=VOCAB, eos_token_id=1, pad_token_id=PAD)


def training(finetune: str, **extra: Any) -> dict[str, Any]:
    """The training knobs PolicySet and Trainer.update read, at test sizes."""
    return {
        "finetune": finetune,
        "lora": {"r": 4, "lora_alpha": 8, "target_modules": "all-linear"},
        "max_steps": 4,
        "num_iterations": 1,
        "warmup_ratio": 0.0,
        "learning_rate": 1e-2,
        "lr_scheduler_type": "linear",
        "max_grad_norm": 1.0,
        "epsilon": 0.2,
        "epsilon_high": 0.28,
        "beta": 0.0,
        "loss_type": "grpo",
        "micro_batch_tokens": 64,
        "temperature": 0.7,
        "max_completion_length": 8,
        **extra,
    }


def make_trainer(routing: dict[str, str], t: dict[str, Any], seed: int = 0) -> SimpleNamespace:
    """What `Trainer.update` uses, built from settings: the policies over a tiny model and their
    PolicyUpdater (no task, data or run directory); `t` stays the dict the checks below read."""
    settings = from_dict(TrainingSettings, t, "training")
    policies = PolicySet(tiny_qwen3(seed), routing, settings)
    if t["finetune"] == "lora":
        # PEFT initialises lora_B to zero (then lora_A gets no gradient): perturb so every weight does
        with torch.no_grad():
            for p in policies:
                for x in p.params:
                    x.add_(0.05 * torch.randn_like(x))
    updater = PolicyUpdater(policies, settings, pad_id=PAD, device="cpu")
    return SimpleNamespace(t=t, routing=routing, policies=policies, recorders=updater.recorders, update=updater.update)


def rows_for(roles: list[str], per_role: int = 5, seed: int = 1) -> list[Row]:
    """Rows of every role, of varied lengths, advantages of both signs (several micro-batches per role)."""
    rng = random.Random(seed)
    rows = []
    for role in roles:
        for _ in range(per_role):
            rows.append(
                Row(
                    role,
                    [rng.randrange(2, VOCAB) for _ in range(rng.randint(2, 6))],
                    [rng.randrange(2, VOCAB) for _ in range(rng.randint(1, 8))],
                    advantage=rng.uniform(-2, 2),
                    reward=0.0,
                )
            )
    return rows


def snapshot(trainer: SimpleNamespace) -> dict[str, list[torch.Tensor]]:
    return {p.name: [x.detach().clone() for x in p.params] for p in trainer.policies}


def separate_grads(trainer: SimpleNamespace, policy_name: str, rows: list[Row], key=lambda r: r.role) -> dict:
    """Each group's flat gradient (rows grouped by `key`: role, or (role, agent)) from its own backward
    pass: its rows' share of the policy loss (normalised by the policy's whole batch, as the update
    does), computed here from scratch."""
    t = trainer.t
    policy = trainer.policies.policies[policy_name]
    model = trainer.policies.model(policy_name)
    model.train()
    totals = BatchTotals(
        n_sequences=len(rows),
        n_tokens=sum(len(r.completion_ids) for r in rows),
        max_completion_length=t["max_completion_length"],
    )
    out = {}
    for group in dict.fromkeys(key(r) for r in rows):
        mine = [r for r in rows if key(r) == group]
        ids, attn, cmask = collate(mine, PAD)  # one batch: padding does not change a masked loss
        logps, _ = per_token_logps(model, ids, attn, cmask.shape[1], t["temperature"])
        adv = torch.tensor([r.advantage for r in mine])
        token = grpo_token_loss(logps, logps.detach(), adv, t["epsilon"], t["epsilon_high"])
        loss = LOSS_AGGREGATIONS[t["loss_type"]](token.loss, cmask, totals)
        grads = torch.autograd.grad(loss, policy.params, allow_unused=True)
        out[group] = torch.cat(
            [(g if g is not None else torch.zeros_like(p)).flatten() for g, p in zip(grads, policy.params)]
        )
    return out


def separate_role_grad_norms(trainer: SimpleNamespace, policy_name: str, rows: list[Row]) -> dict[str, float]:
    """Each role's gradient norm from its own backward pass (separate_grads)."""
    return {role: float(g.norm()) for role, g in separate_grads(trainer, policy_name, rows).items()}


@pytest.mark.parametrize("finetune", ["lora", "full"])
def test_shared_one_optimizer_gets_every_roles_gradient(finetune: str) -> None:
    roles = ("generator", "aggregator")
    routing = routing_table("shared", roles)
    assert routing == {"generator": "shared", "aggregator": "shared"}
    trainer = make_trainer(routing, training(finetune))
    assert list(trainer.policies.policies) == ["shared"]
    policy = trainer.policies.policies["shared"]
    assert policy.roles == list(roles)
    assert {id(p) for g in policy.optimizer.param_groups for p in g["params"]} == {id(p) for p in policy.params}
    rows = rows_for(list(roles))
    before = snapshot(trainer)
    stats = trainer.update(policy, rows)
    grads = trainer.recorders["shared"].grads
    for role in roles:  # every role's rows reached the one optimizer's parameters
        assert set(grads) == set(roles)
        assert sum(float(g.pow(2).sum()) for g in grads[role] if g is not None) > 0, role
        assert stats[role]["grad_norm"] > 0
    assert sum(stats[r]["grad_sq_share"] for r in roles) == pytest.approx(1.0, abs=1e-9)
    assert not all(torch.equal(a, b) for a, b in zip(before["shared"], policy.params))


@pytest.mark.parametrize("finetune", ["lora", "full"])
@pytest.mark.parametrize(
    "groups, updated",
    [
        (None, "generator"),  # isolated: each role its own policy
        ({"voters_and_aggregator": ["generator", "aggregator"], "judge": ["evaluator"]}, "voters_and_aggregator"),
    ],
)
def test_isolated_update_leaves_other_policies_bit_identical(
    finetune: str, groups: dict | None, updated: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    roles = ("generator", "aggregator", "evaluator")
    routing = routing_table("isolated", roles, groups)
    trainer = make_trainer(routing, training(finetune))
    expected = {r: r for r in roles} if groups is None else {r: n for n, ms in groups.items() for r in ms}
    assert routing == expected  # routed as declared
    assert set(trainer.policies.policies) == set(expected.values())
    for p in trainer.policies:
        assert p.roles == [r for r in roles if expected[r] == p.name]
    # each policy has its own optimizer over only its own parameters, and its own scheduler
    owner = {id(x): p.name for p in trainer.policies for x in p.params}
    assert len(owner) == sum(len(p.params) for p in trainer.policies), "a parameter in two policies"
    for p in trainer.policies:
        assert {owner[id(x)] for g in p.optimizer.param_groups for x in g["params"]} == {p.name}
    assert len({id(p.scheduler) for p in trainer.policies}) == len(trainer.policies.policies)

    clipped: list[list[int]] = []
    real_clip = torch.nn.utils.clip_grad_norm_

    def spy_clip(params, *args, **kwargs):  # which parameters each clipping saw
        params = list(params)
        clipped.append([id(x) for x in params])
        return real_clip(params, *args, **kwargs)

    monkeypatch.setattr(train_mod.torch.nn.utils, "clip_grad_norm_", spy_clip)
    policy = trainer.policies.policies[updated]
    frozen_base = (
        [x.detach().clone() for n, x in trainer.policies.modules()[0].named_parameters() if "lora_" not in n]
        if finetune == "lora"
        else []
    )
    before = snapshot(trainer)
    lrs = {p.name: p.scheduler.get_last_lr()[0] for p in trainer.policies}
    trainer.update(policy, rows_for(policy.roles))
    assert clipped == [[id(x) for x in policy.params]]  # clipping over this policy's parameters only
    for p in trainer.policies:
        same = [torch.equal(a, b) for a, b in zip(before[p.name], p.params)]
        if p.name == updated:
            assert not all(same)
            assert p.scheduler.last_epoch == 1 and p.scheduler.get_last_lr()[0] != lrs[p.name]
        else:
            assert all(same), f"policy {p.name} changed by an update of {updated}"
            assert p.scheduler.last_epoch == 0 and p.scheduler.get_last_lr()[0] == lrs[p.name]
            assert all(s == {} for s in p.optimizer.state.values()) or not p.optimizer.state
    if finetune == "lora":  # the shared base stays frozen
        after = [x for n, x in trainer.policies.modules()[0].named_parameters() if "lora_" not in n]
        assert all(torch.equal(a, b) for a, b in zip(frozen_base, after))


@pytest.mark.parametrize("finetune", ["lora", "full"])
@pytest.mark.parametrize("mode", ["shared", "isolated"])
def test_recorded_role_grad_norms_equal_separate_backward_passes(finetune: str, mode: str) -> None:
    roles = ("orchestrator", "worker", "synthesizer")
    trainer = make_trainer(routing_table(mode, roles), training(finetune))
    rows = rows_for(list(roles), per_role=6)
    for policy in trainer.policies:
        mine = [r for r in rows if trainer.routing[r.role] == policy.name]
        expected = separate_role_grad_norms(trainer, policy.name, mine)  # before the update's step
        assert len(train_mod.micro_batches(mine, trainer.t["micro_batch_tokens"])) > len(policy.roles)
        stats = trainer.update(policy, mine)
        assert set(stats) == set(policy.roles)
        for role in policy.roles:
            assert abs(stats[role]["grad_norm"] - expected[role]) <= TOL * max(1.0, expected[role]), (
                role,
                stats[role]["grad_norm"],
                expected[role],
            )
        shares = [stats[r]["grad_sq_share"] for r in policy.roles]
        assert sum(shares) == pytest.approx(1.0, abs=1e-9)
        if len(policy.roles) > 1:
            assert all(0 < s < 1 for s in shares)
            assert all(-1 <= stats[r]["grad_cos_others"] <= 1 for r in policy.roles)
        else:
            assert shares == [1.0]


@pytest.mark.parametrize("agent_gradients", [False, True])
def test_zero_advantage_rows_are_not_back_propagated_and_change_nothing(
    agent_gradients: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With beta = 0 a zero-advantage row has exactly zero gradient: the update skips its backward
    pass, yet every logged statistic and the step itself are those of back-propagating every row
    (computed here from scratch): a role whose rows all have zero advantage is present with a zero
    gradient, and the entropy and token count cover every row."""
    roles = ("generator", "aggregator")
    trainer = make_trainer(routing_table("shared", roles), training("lora", agent_gradients=agent_gradients))
    rows = rows_for(list(roles), per_role=8)
    for i, r in enumerate(rows):  # every aggregator row and every other generator row: zero advantage
        if r.role == "aggregator" or i % 2:
            r.advantage = 0.0
        r.agent = i % 2 if agent_gradients and r.role == "generator" else 0
    policy = trainer.policies.policies["shared"]
    model = trainer.policies.model("shared")
    model.train()
    expected = separate_grads(trainer, "shared", rows)  # every row back-propagated
    with torch.no_grad():
        ids, attn, cmask = collate(rows, PAD)
        logps, entropy = per_token_logps(model, ids, attn, cmask.shape[1], trainer.t["temperature"], True)
    expected_entropy = {
        role: float(sum((entropy[i] * cmask[i]).sum() for i, r in enumerate(rows) if r.role == role)) for role in roles
    }
    expected_tokens = {role: sum(len(r.completion_ids) for r in rows if r.role == role) for role in roles}
    # the step every row's backward pass would take: the summed gradient, clipped, one AdamW step
    after = [p.detach().clone() for p in policy.params]
    total = sum(expected.values())
    shadow = [torch.nn.Parameter(p.detach().clone()) for p in policy.params]
    offset = 0
    for p in shadow:
        p.grad = total[offset : offset + p.numel()].view_as(p).clone()
        offset += p.numel()
    torch.nn.utils.clip_grad_norm_(shadow, trainer.t["max_grad_norm"])
    group = policy.optimizer.param_groups[0]
    torch.optim.AdamW(shadow, **{k: group[k] for k in ("lr", "betas", "eps", "weight_decay")}).step()
    back_propagated: list[Row] = []
    backward = PolicyUpdater._backward

    def spy(self, policy, model, batch, *args):
        back_propagated.extend(batch)
        return backward(self, policy, model, batch, *args)

    monkeypatch.setattr(PolicyUpdater, "_backward", spy)
    stats = trainer.update(policy, rows)
    assert back_propagated and all(r.advantage != 0 for r in back_propagated)
    assert len(back_propagated) == sum(r.advantage != 0 for r in rows)
    assert stats["aggregator"]["grad_norm"] == 0.0 and stats["aggregator"]["grad_sq_share"] == 0.0
    assert stats["generator"]["grad_sq_share"] == 1.0
    for role in roles:
        assert stats[role]["grad_norm"] == pytest.approx(float(expected[role].norm()), rel=TOL, abs=1e-12)
        assert stats[role]["entropy"] == pytest.approx(expected_entropy[role], rel=TOL)
        assert stats[role]["tokens"] == expected_tokens[role]
        assert stats[role]["clipped"] == 0.0 and not stats[role]["skipped"]
    if agent_gradients:  # both generator agents counted, and the aggregator's one agent, at zero
        assert stats["generator"]["n_agents"] == 2
        assert stats["aggregator"]["n_agents"] == 1 and stats["aggregator"]["agent_grad_norms"] == [0.0]
    for p, q, _a in zip(policy.params, shadow, after):
        assert torch.allclose(p, q, atol=1e-6)
    assert not all(torch.equal(p, a) for p, a in zip(policy.params, after))


def test_a_step_whose_rows_all_have_zero_advantage_still_steps_adam() -> None:
    """Nothing is back-propagated, yet the optimizer steps on zero gradients as it would had every
    row been: Adam's momentum from the step before moves the weights, and its step count advances."""
    trainer = make_trainer(routing_table("shared", ("generator",)), training("lora"))
    policy = trainer.policies.policies["shared"]
    trainer.update(policy, rows_for(["generator"]))
    idle = rows_for(["generator"], seed=2)
    for r in idle:
        r.advantage = 0.0
    before = [p.detach().clone() for p in policy.params]
    stats = trainer.update(policy, idle)
    assert stats["generator"]["grad_norm"] == 0.0 and not stats["generator"]["skipped"]
    assert all(policy.optimizer.state[p]["step"] == 2 for p in policy.params)
    assert not all(torch.equal(p, b) for p, b in zip(policy.params, before))


def test_policy_groups_from_config_reach_the_routing_table() -> None:
    """training.policy_groups is a valid config key and is what the trainer's routing reads."""
    from tests.workflow import ROOT
    from trainer.contract.config import ConfigError
    from trainer.contract.runid import parse_run_id
    from trainer.sweep.config import load_yaml, resolve_run_config, validate_config

    config = load_yaml(ROOT / "config.yaml")
    groups = {"voters_and_aggregator": ["generator", "aggregator"]}
    # policy_groups must cover each run's workflow, so they are set for the voting runs only
    config["overrides"].append({"match": {"workflow": "voting"}, "training": {"policy_groups": groups}})
    validate_config(config, load_yaml(ROOT / "rules" / "config.schema.yaml"))
    rc = resolve_run_config(config, parse_run_id("voting-math-tiny-isolated-s0"))
    assert rc["training"]["policy_groups"] == groups
    assert routing_table(rc["policy"], ("generator", "aggregator"), rc["training"]["policy_groups"]) == {
        "generator": "voters_and_aggregator",
        "aggregator": "voters_and_aggregator",
    }
    config["training"]["policy_groups"] = groups  # on every workflow: eval_opt's evaluator has no policy
    with pytest.raises(ConfigError, match=r"training.policy_groups: .*'evaluator'"):
        validate_config(config, load_yaml(ROOT / "rules" / "config.schema.yaml"))
    with pytest.raises(ValueError, match="without a policy"):
        routing_table("isolated", ("generator", "aggregator"), {"voters": ["generator"]})
