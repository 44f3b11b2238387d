"""Per-agent gradients of parallel roles (trainer/rl/agent_gradients.py).

On a tiny random Qwen3: with `training.agent_gradients`, each agent's gradient norm that the update
records (voting's 3 voters, orch_workers' 3 workers; shared and isolated policies) equals a separate
backward pass over that agent's rows alone, and so do the amplification index and mean cosine; the
per-role metrics stay those of separate role passes. The index and cosine equal a hand computation
on planted gradients; off, the micro-batches are the per-role ones and no agent metric is recorded;
the columns survive parquet with their types and feed the amplification early warning.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pandas as pd
import pytest
import torch

from tests.network import free_port
from tests.runs import tiny_run_config
from tests.test_distributed import RUN, SMALL, update_worker
from tests.test_routing import VOCAB, make_trainer, separate_grads, separate_role_grad_norms, training
from trainer import early_warning
from trainer.contract import rundir
from trainer.rl.agent_gradients import AGENT_COLUMNS, agent_columns, agent_metrics, role_agent_metrics, row_agent
from trainer.rl.policies import routing_table
from trainer.rl.train import Trainer
from trainer.rl.update import Row, micro_batches
from trainer.sweep.launch import write_run_config

TOL = 1e-5
RUN_ISOLATED = "voting-math-tiny-isolated-s0"
WORKFLOWS = {  # roles, the parallel role, and rows per agent of each role (workers: uneven, as plans are)
    "voting": (("generator", "aggregator"), "generator", {"generator": [8, 8, 8], "aggregator": [8]}),
    "orch_workers": (
        ("orchestrator", "worker", "synthesizer"),
        "worker",
        {"orchestrator": [8], "worker": [8, 6, 3], "synthesizer": [8]},
    ),
}


def agent_rows(counts: dict[str, list[int]], seed: int = 1) -> list[Row]:
    """Rows in rollout order: per episode, each role's agents in turn (agents interleave, as voters do)."""
    rng = random.Random(seed)
    rows = []
    for episode in range(max(n for ns in counts.values() for n in ns)):
        for role, per_agent in counts.items():
            for agent, n in enumerate(per_agent):
                if episode < n:
                    rows.append(
                        Row(
                            role,
                            [rng.randrange(2, VOCAB) for _ in range(rng.randint(2, 6))],
                            [rng.randrange(2, VOCAB) for _ in range(rng.randint(1, 8))],
                            advantage=rng.uniform(-2, 2),
                            reward=0.0,
                            agent=agent,
                        )
                    )
    return rows


@pytest.mark.parametrize("mode", ["shared", "isolated"])
@pytest.mark.parametrize("workflow", ["voting", "orch_workers"])
def test_recorded_agent_grad_norms_equal_separate_backward_passes(workflow: str, mode: str) -> None:
    roles, parallel, counts = WORKFLOWS[workflow]
    trainer = make_trainer(routing_table(mode, roles), training("lora", agent_gradients=True))
    rows = agent_rows(counts)
    for policy in trainer.policies:
        mine = [r for r in rows if trainer.routing[r.role] == policy.name]
        # before the update's step
        expected = separate_grads(trainer, policy.name, mine, key=lambda r: (r.role, r.agent))
        expected_roles = separate_role_grad_norms(trainer, policy.name, mine)
        batches = micro_batches(mine, trainer.t["micro_batch_tokens"], by_agent=True)
        assert all(len({(r.role, r.agent) for r in b}) == 1 for b in batches)  # one agent per micro-batch
        assert len(batches) > len({(r.role, r.agent) for r in mine})  # and several for some agents
        stats = trainer.update(policy, mine)
        for role in policy.roles:
            s, agents = stats[role], [g for (r, _), g in sorted(expected.items()) if r == role]
            assert s["n_agents"] == len(counts[role]) == len(s["agent_grad_norms"])
            for got, g in zip(s["agent_grad_norms"], agents):
                norm = float(g.double().norm())
                assert abs(got - norm) <= TOL * norm, (role, got, norm)  # relative: these norms are < 1
            assert abs(s["grad_norm"] - expected_roles[role]) <= TOL * max(1.0, expected_roles[role])
            if role != parallel:
                assert math.isnan(s["amplification_index"]) and math.isnan(s["agent_cos_mean"])
                continue
            agents = [g.double() for g in agents]
            norms = [float(g.norm()) for g in agents]
            amp = sum(norms) / float(torch.stack(agents).sum(0).norm())
            cos = [float(agents[i] @ agents[j]) / (norms[i] * norms[j]) for i in range(3) for j in range(i + 1, 3)]
            assert s["amplification_index"] == pytest.approx(amp, rel=TOL) and s["amplification_index"] > 1
            assert s["agent_cos_mean"] == pytest.approx(sum(cos) / 3, abs=TOL)


def test_amplification_and_cosine_on_planted_gradients() -> None:
    m = agent_metrics([torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 0.0]), torch.tensor([0.0, 2.0])])
    # norms 1, 1, 2; sum (0, 2): index (1 + 1 + 2) / 2; cosines -1, 0, 0
    assert m["n_agents"] == 3 and m["agent_grad_norms"] == [1.0, 1.0, 2.0]
    assert m["amplification_index"] == pytest.approx(2.0) and m["agent_cos_mean"] == pytest.approx(-1 / 3)
    same = agent_metrics([torch.tensor([3.0, 4.0])] * 2)  # aligned agents: no amplification
    assert same["amplification_index"] == pytest.approx(1.0) and same["agent_cos_mean"] == pytest.approx(1.0)
    cancel = agent_metrics([torch.tensor([1.0, 2.0]), torch.tensor([-1.0, -2.0])])  # zero sum: undefined
    assert math.isnan(cancel["amplification_index"]) and cancel["agent_cos_mean"] == pytest.approx(-1.0)
    one = agent_metrics([torch.tensor([1.0, 2.0])])
    assert one["n_agents"] == 1 and math.isnan(one["amplification_index"]) and math.isnan(one["agent_cos_mean"])
    idle = agent_metrics([torch.tensor([1.0, 0.0]), torch.zeros(2), torch.tensor([1.0, 1.0])])  # a zero gradient
    assert idle["agent_cos_mean"] == pytest.approx(1 / math.sqrt(2))  # no cosine with it
    assert idle["amplification_index"] == pytest.approx((1 + math.sqrt(2)) / math.sqrt(5))
    # per role, agents in index order whatever the recording order; a missing parameter counts as zeros
    shapes = [torch.Size([2]), torch.Size([1])]
    grads = {
        ("w", 1): [torch.tensor([0.0, 2.0]), None],
        ("w", 0): [torch.tensor([1.0, 0.0]), torch.tensor([2.0])],
        ("o", 0): [torch.tensor([3.0, 4.0]), None],
    }
    by_role = role_agent_metrics(grads, shapes)
    assert by_role["w"]["agent_grad_norms"] == pytest.approx([math.sqrt(5), 2.0])
    assert by_role["w"]["agent_cos_mean"] == pytest.approx(0.0)
    assert by_role["o"] == {
        "n_agents": 1,
        "agent_grad_norms": [5.0],
        "amplification_index": pytest.approx(math.nan, nan_ok=True),
        "agent_cos_mean": pytest.approx(math.nan, nan_ok=True),
    }


def test_off_the_micro_batches_are_per_role_and_no_agent_metric_is_recorded() -> None:
    roles, _, counts = WORKFLOWS["voting"]
    rows = agent_rows(counts)
    batches = micro_batches(rows, 64)
    assert [r for b in batches for r in b] == [r for role in roles for r in rows if r.role == role]  # stable
    assert all(len({r.role for r in b}) == 1 for b in batches)
    assert any(len({r.agent for r in b}) > 1 for b in batches)  # agents mixed: the per-role batching
    trainer = make_trainer(routing_table("shared", roles), training("lora"))
    stats = trainer.update(trainer.policies.policies["shared"], rows)
    assert not any(k in s for s in stats.values() for k in AGENT_COLUMNS)
    assert trainer.recorders["shared"].agent_grads == {}


def test_only_the_parallel_role_has_agents() -> None:
    assert row_agent("generator", 2, "generator") == 2
    assert row_agent("generator", 2, None) == 0  # eval_opt: round 2 is the one generator acting again
    assert row_agent("aggregator", 1, "generator") == 0


def test_columns_keep_their_types_in_parquet_and_feed_the_amplification_warning(tmp_path) -> None:
    rows = []
    for step in range(1, 5):
        amp = 1.1 if step < 3 else 3.0  # planted: the voters' gradients start to cancel at step 3
        voters = {"n_agents": 3, "agent_grad_norms": [1.0, 2.0, 0.5], "amplification_index": amp, "agent_cos_mean": 0.1}
        for role, stats in (("generator", voters), ("aggregator", {}), ("orphan", {"n_agents": 1})):
            rows.append(
                {
                    "step": step,
                    "role": role,
                    "policy": role,
                    "n_turns": 4,
                    "n_tokens": 10,
                    **{
                        c: 0.5
                        for c in (
                            "reward_mean",
                            "reward_std",
                            "adv_abs_mean",
                            "loss",
                            "grad_norm",
                            "grad_sq_share",
                            "grad_cos_others",
                            "entropy",
                            "kl",
                            "clip_ratio",
                            "completion_len_mean",
                            "lr",
                            "logp_mismatch",
                            "time_s",
                        )
                    },
                    "skipped": False,
                    **agent_columns(stats),
                }
            )
    path = tmp_path / rundir.TRAIN_PARQUET
    rundir.write_parquet_atomic(rundir.to_table(rows, rundir.TRAIN_SCHEMA), path)
    train = pd.read_parquet(path)
    assert train["n_agents"].dtype == "int64" and list(train["n_agents"][:3]) == [3, 0, 1]
    assert list(train["agent_grad_norms"][0]) == [1.0, 2.0, 0.5] and len(train["agent_grad_norms"][1]) == 0
    assert train.loc[train["role"] != "generator", "amplification_index"].isna().all()
    # a resume reads the logs back as records (checkpoint.py) and writes them again: same table
    again = rundir.to_table(train.to_dict("records"), rundir.TRAIN_SCHEMA)
    assert again.equals(rundir.to_table(rows, rundir.TRAIN_SCHEMA))
    thresholds = early_warning.thresholds_of({"early_warning": {"window": 1, "amplification_index": 2.0}})
    found = early_warning.warnings_from_train(train, thresholds)
    amp = found[found["detector"] == "amplification"]
    assert list(zip(amp["step"], amp["role"])) == [(3, "generator")] and float(amp["value"].iloc[0]) == 3.0


def test_two_processes_record_the_one_process_agent_gradients(base_model: dict, tmp_path: Path) -> None:
    """DDP (2 gloo processes, the rollouts of one): the per-agent sums are all-reduced, so every
    agent's norm, the index and the cosine are the one-process ones; the Trainer's rows carry the
    voters' instances (3 agents) and the aggregator is one agent."""
    run_dir, rows = tmp_path / RUN, tmp_path / "rows.pkl"
    write_run_config(tiny_run_config(RUN, {**SMALL, "agent_gradients": True}), base_model, run_dir)
    results = {}
    for world in (1, 2):
        out = tmp_path / f"update-{world}.pt"
        torch.multiprocessing.spawn(
            update_worker, args=(world, str(run_dir), str(rows), str(out), free_port()), nprocs=world, join=True
        )
        results[world] = torch.load(out, weights_only=False)["stats"]["shared"]
    one, two = results[1], results[2]
    assert one["generator"]["n_agents"] == two["generator"]["n_agents"] == 3
    assert one["aggregator"]["n_agents"] == two["aggregator"]["n_agents"] == 1
    assert min(one["generator"]["agent_grad_norms"]) > 1e-3
    for role in ("generator", "aggregator"):
        assert two[role]["agent_grad_norms"] == pytest.approx(one[role]["agent_grad_norms"], rel=1e-5, abs=1e-6)
    for key in ("amplification_index", "agent_cos_mean"):
        assert two["generator"][key] == pytest.approx(one["generator"][key], rel=1e-5, abs=1e-6), key
    assert one["generator"]["amplification_index"] > 1


def test_a_run_logs_the_agent_columns_only_when_set(base_model: dict, tmp_path: Path) -> None:
    logs = {}
    for on in (False, True):
        run_dir = tmp_path / str(on) / RUN_ISOLATED
        training = {
            **SMALL,
            "max_steps": 1,
            "eval_every": 1,
            "eval_problems": 4,
            "agent_gradients": on,  # set both ways: config.yaml turns it on
        }
        write_run_config(tiny_run_config(RUN_ISOLATED, training), base_model, run_dir)
        Trainer(json.loads((run_dir / rundir.CONFIG_JSON).read_text()), run_dir, log=lambda msg: None).fit()
        logs[on] = pd.read_parquet(run_dir / rundir.TRAIN_PARQUET).set_index("role")
    assert not set(AGENT_COLUMNS) & set(logs[False].columns)
    on = logs[True]
    assert on.loc["generator", "n_agents"] == 3 and len(on.loc["generator", "agent_grad_norms"]) == 3
    assert on.loc["aggregator", "n_agents"] == 1 and math.isnan(on.loc["aggregator", "amplification_index"])


def test_a_runs_amplification_index_is_its_median_step_not_a_cancelling_one() -> None:
    """One step whose agents' gradients nearly cancel (index ~1e6) does not become the run's index: the
    summary takes the median over steps (analysis.agents.agent_facts), while the cosine keeps its mean."""
    from analysis.agents import agent_facts

    index = [1.5, 1.7, 1.6, 1.0e6, 1.8]
    train = pd.DataFrame(
        {
            "role": ["generator"] * 5,
            "skipped": [False] * 5,
            "n_agents": [3] * 5,
            "amplification_index": index,
            "agent_cos_mean": [0.1, 0.2, 0.3, -1.0, 0.4],
        }
    )
    roles = rundir.WorkflowRoles(("generator", "aggregator"), "generator", 3.0)
    facts = agent_facts(train, {"run": "voting-math-tiny-isolated-s0"}, roles)
    assert facts["amplification_index"] == pytest.approx(1.7)
    assert facts["agent_cos_mean"] == pytest.approx(0.0)
    assert facts["n_agents"] == 3
