"""Data-parallel training (trainer/rl/distributed.py) with two gloo processes on CPU: given the same
rollouts, the update equals the one-process update (loss, per-role gradient metrics, new adapter
weights); a whole 2-process run (submitit's local backend, 2 tasks) is deterministic given its seed
and its logs have one row per step and role, written once."""

from __future__ import annotations

import json
import math
import pickle
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from tests.float_order import trainer_env
from tests.network import free_port
from tests.resilience import assert_same_logs, published_logs
from tests.runs import tiny_run_config
from tests.workflow import ROOT
from trainer.contract import rundir
from trainer.contract.config import ConfigError
from trainer.rl.distributed import Ranks, shard_bounds
from trainer.rl.processes import world_size_of
from trainer.sweep.launch import write_run_config

RUN = "voting-math-tiny-shared-s0"  # two roles (generator, aggregator) on one policy: cosines are defined
SMALL = {
    "max_steps": 2,
    "eval_every": 2,
    "save_every": 2,
    "prompts_per_step": 4,
    "num_generations": 4,
    "eval_problems": 8,
    "samples_per_eval": 2,
}


def test_shards_cover_items_in_order() -> None:
    for n in range(0, 9):
        for world in (1, 2, 3):
            parts = [Ranks(r, world, r).shard(list(range(n))) for r in range(world)]
            assert [x for p in parts for x in p] == list(range(n))
            assert max(map(len, parts)) - min(map(len, parts)) <= 1
    assert shard_bounds(5, 1, 2) == (3, 5)


def test_world_size_from_resources() -> None:
    assert world_size_of({"gpus": 0}) == 1
    assert world_size_of({"gpus": 0, "processes": 2}) == 2
    assert world_size_of({"gpus": 4}) == 4 == world_size_of({"gpus": 4, "processes": 4})
    with pytest.raises(ConfigError, match="resources.processes: 2 with resources.gpus: 4"):
        world_size_of({"gpus": 4, "processes": 2})


def update_worker(rank: int, world: int, run_dir: str, rows_path: str, out_path: str, port: int) -> None:
    """One rank: build the run's trainer, take the rollouts of `rows_path` (or make and save them
    when it does not exist: the one-process reference), update every policy on its share, and
    (rank 0) save the per-role stats and the new trainable weights to `out_path`."""
    from trainer.rl.train import Trainer

    torch.set_num_threads(1)
    if world > 1:
        torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    ranks = Ranks(rank, world, rank)
    cfg = json.loads((Path(run_dir) / rundir.CONFIG_JSON).read_text())
    trainer = Trainer(cfg, run_dir, log=lambda msg: None, ranks=ranks)
    if not Path(rows_path).exists():
        episodes, _ = trainer.rollout(1)
        turns = [t for ep in episodes for t in ep.turns]
        for i, t in enumerate(turns):  # the tiny model's rewards are often all equal (zero advantages):
            t.advantage = (i % 4) - 1.5  # fixed, non-zero advantages give every role a real gradient
        Path(rows_path).write_bytes(pickle.dumps({p.name: trainer.policy_rows(p, turns) for p in trainer.policies}))
    rows = pickle.loads(Path(rows_path).read_bytes())
    before = {p.name: [x.detach().clone() for x in p.params] for p in trainer.policies}
    stats = {p.name: trainer.update(p, ranks.shard(rows[p.name])) for p in trainer.policies}
    shares = {p.name: len(ranks.shard(rows[p.name])) for p in trainer.policies}
    if rank == 0:
        params = {p.name: [x.detach().clone() for x in p.params] for p in trainer.policies}
        torch.save({"stats": stats, "params": params, "before": before, "shares": shares}, out_path)
    if world > 1:
        torch.distributed.destroy_process_group()


def test_two_process_update_equals_one_process_update(base_model: dict, tmp_path: Path) -> None:
    run_dir, rows = tmp_path / RUN, tmp_path / "rows.pkl"
    write_run_config(tiny_run_config(RUN, SMALL), base_model, run_dir)
    results = {}
    for world in (1, 2):
        out = tmp_path / f"update-{world}.pt"
        torch.multiprocessing.spawn(
            update_worker, args=(world, str(run_dir), str(rows), str(out), free_port()), nprocs=world, join=True
        )
        results[world] = torch.load(out, weights_only=False)
    one, two = results[1], results[2]
    assert all(n >= 2 for n in two["shares"].values()), two["shares"]  # rank 0 had a real share, not all
    for policy, roles in one["stats"].items():
        assert set(roles) == set(two["stats"][policy]) == {"generator", "aggregator"}
        for role, s in roles.items():
            for key in ("loss", "grad_norm", "grad_sq_share", "grad_cos_others", "entropy", "tokens"):
                assert not math.isnan(s[key]), (role, key)
                assert two["stats"][policy][role][key] == pytest.approx(s[key], abs=1e-5, rel=1e-5), (role, key)
            assert s["grad_norm"] > 1e-3 and not s["skipped"]
        # Adam's first step is lr * g / (|g| + eps): an element whose summed gradient is ~eps moves by
        # an amount that float summation order (micro-batches vs ranks) shifts; measured: 1 of 2048
        # elements of one tensor off by 1.25e-5. So: every element within 1e-4, all but 0.1% within 1e-5.
        diffs = torch.cat([(a - b).abs().flatten() for a, b in zip(one["params"][policy], two["params"][policy])])
        assert float(diffs.max()) < 1e-4 and float((diffs > 1e-5).float().mean()) < 1e-3, float(diffs.max())
        moved = max(float((a - b).abs().max()) for a, b in zip(one["params"][policy], one["before"][policy]))
        assert moved > 1e-4  # the update changed the adapters: the equality above is not trivial


def launch_two_processes(base_model: Path, run_dir: Path, timeout_s: float = 300) -> str:
    """A whole run with resources.processes 2 on submitit's local backend (2 tasks); its log."""
    rc = tiny_run_config(RUN, SMALL, backend="local", poll_interval_s=1)
    rc["resources"].update(processes=2, cpus=2)
    cmd = [
        sys.executable,
        "-m",
        "trainer",
        "launch",
        "--run-config",
        json.dumps(rc),
        "--base-model",
        str(base_model),
        "--run-dir",
        str(run_dir),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=trainer_env(), capture_output=True, text=True, timeout=timeout_s)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stderr


def test_two_process_run_is_deterministic_and_logs_once(base_model_json: Path, tmp_path: Path) -> None:
    logs = []
    for name in ("a", "b"):
        run_dir = tmp_path / name / RUN
        launch_two_processes(base_model_json, run_dir)
        task_logs = sorted((run_dir / rundir.WORK_DIR / "submitit").glob("*_log.err"))
        assert len(task_logs) == 2, task_logs  # one log per rank
        assert all("of 2 (gloo" in p.read_text() for p in task_logs)
        assert json.loads((run_dir / rundir.DONE_JSON).read_text())["steps_done"] == SMALL["max_steps"]
        logs.append(published_logs(run_dir))
    train, evals = logs[0]["train"], logs[0]["eval"]
    keys = train[["step", "role"]].apply(tuple, axis=1)
    assert sorted(keys) == [(s, r) for s in (1, 2) for r in ("aggregator", "generator")]
    assert not evals.duplicated(["step", "split"]).any() and sorted(evals["step"].unique()) == [0, 2]
    assert (evals["n"] == SMALL["eval_problems"]).all()  # both ranks' eval shares gathered
    assert (train["n_turns"] > 0).all() and pd.notna(train["grad_norm"]).all()
    assert_same_logs(logs[0], logs[1])


def failing_worker(rank: int, port: int, out_dir: str) -> None:
    """Rank 1 dies before a collective; rank 0 records how its reduction ended."""
    import time

    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    if rank == 1:
        raise SystemExit(3)
    t0 = time.time()
    try:
        Ranks(0, 2, 0).sum_floats([1.0])
        outcome = "returned"
    except Exception as e:  # what a failed peer looks like to the survivor
        outcome = f"{type(e).__name__}: {e}"
    Path(out_dir, "rank0.json").write_text(json.dumps({"outcome": outcome, "s": time.time() - t0}))


def test_a_dead_rank_fails_its_peer_at_once(tmp_path: Path) -> None:
    """Gloo: the survivor's collective raises when its peer's connection closes (no 30-minute hang)."""
    ctx, port = torch.multiprocessing.get_context("spawn"), free_port()
    procs = [ctx.Process(target=failing_worker, args=(r, port, str(tmp_path))) for r in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    alive = [p.is_alive() for p in procs]
    for p in procs:
        p.kill()
    assert alive == [False, False] and procs[1].exitcode == 3
    result = json.loads((tmp_path / "rank0.json").read_text())
    assert result["outcome"] != "returned" and result["s"] < 60, result
