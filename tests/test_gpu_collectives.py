"""The GPU path's rules, checked on CPU: collectives and devices.

No test here needs a GPU: CUDA is faked where a rule depends on it (tests/collective_checker.py: device
counts, set_device, the backend a collective meets). What only a GPU shows (NCCL itself) is said in
docs/gpu.md; benchmarks/device_check.sh runs what the GPU machine can. tests/test_gpu_vllm_rules.py
checks the vLLM engine's side.

Every collective's tensor on a device its backend serves (no CPU tensor in an NCCL collective):
    test_checker_fails_a_cpu_tensor_on_an_nccl_group, test_two_ranks_every_collective_is_served_by_the_gpu_backend.
The GPU a task uses is its local rank among the GPUs it sees:
    test_device_is_the_local_rank_among_the_gpus_the_task_sees (and the gpus=1 case of the two-rank test).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tests.collective_checker import CollectiveDeviceError, checked_collectives, fake_gpus, served_device_types
from tests.network import free_port
from trainer.rl.distributed import Ranks, device_of

# -- every collective's tensor on a device its backend serves ------------------------------------


def test_checker_fails_a_cpu_tensor_on_an_nccl_group() -> None:
    """The checker itself: a CPU tensor on an NCCL-only group fails (as `sum_floats`' CPU float64 tensor
    would on a GPU node); on a device-keyed group, or on gloo, it passes."""
    assert served_device_types("nccl") == {"cuda"}
    assert served_device_types("cuda:nccl,cpu:gloo") == {"cuda", "cpu"}
    assert "cpu" in served_device_types("gloo")
    for backend, fails in (("nccl", True), ("cuda:nccl,cpu:gloo", False), ("gloo", False)):
        with fake_gpus(1) as gpus, checked_collectives(gpus) as checker:
            dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
            try:
                t = torch.ones(3, dtype=torch.float64)
                if fails:
                    with pytest.raises(CollectiveDeviceError, match="no backend serves device type cpu"):
                        dist.all_reduce(t)
                else:
                    dist.all_reduce(t)
                    assert checker.calls == [("all_reduce", "cpu")]
            finally:
                dist.destroy_process_group()
        assert checker.backend == backend


def collectives_worker(rank: int, port: int, gpus: int, out_dir: str) -> None:
    """One rank of a job on a (faked) GPU node showing each task `gpus` GPUs: the trainer's own
    process_group, then every collective of Ranks, under the collective checker."""
    from unittest import mock

    from tests.collective_checker import checked_collectives, fake_gpus
    from trainer.rl import distributed

    torch.set_num_threads(1)

    class Exported:  # submitit's TorchDistributedEnvironment, outside a submitit job
        def export(self, **kwargs):
            os.environ.update(
                MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank)
            )
            return self

    record: dict = {}
    with fake_gpus(gpus) as fake, checked_collectives(fake) as checker:
        try:
            with (
                mock.patch.object(distributed, "job_ranks", lambda: distributed.Ranks(rank, 2, rank)),
                mock.patch("submitit.helpers.TorchDistributedEnvironment", Exported),
            ):
                with distributed.process_group({"gpus": 2}, "gpu-rules", timeout_min=0.5) as ranks:
                    record["device"] = distributed.device_of(ranks)
                    record["results"] = exercise(ranks)
            record["outcome"] = "ok"
        except Exception as e:
            record["outcome"] = f"{type(e).__name__}: {e}"
    record.update(backend=checker.backend, calls=sorted(set(checker.calls)), set_device=fake.set_calls)
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(record))


def exercise(ranks: Ranks) -> dict:
    """Every collective the trainer makes (all through Ranks), on tiny values with known results.
    The parameters stand for a GPU's adapters (CPU tensors here: no CUDA tensor can be made)."""
    r = ranks.rank
    out = {
        "gathered": ranks.all_gather([r] * (r + 1)),
        "sums": ranks.sum_floats([1.0, float(r)]),
        "all_true": ranks.all_true(r == 0),
        "any_true": ranks.any_true(r == 1),
    }
    stats = {"generator": {"loss": 1.0, "entropy": 0.5, "kl": 0.0, "clipped": 0.0, "tokens": 2.0}} if r == 0 else {}
    ranks.reduce_role_stats(stats, ["generator", "aggregator"])
    out["stats"] = stats
    params = [torch.nn.Parameter(torch.full((2, 3), float(r + 1)))]
    ranks.broadcast_params(params)
    out["broadcast"] = float(params[0].detach().mean())
    params[0].grad = torch.full((2, 3), float(r + 1))
    role_grads = {"generator": [torch.ones(2, 3)]} if r == 1 else {}
    ranks.reduce_gradients(params, role_grads, ["generator", "aggregator"])
    out["grad"], out["roles"] = float(params[0].grad.mean()), sorted(role_grads)
    agent_grads = {("generator", r): [torch.ones(2, 3)]}
    ranks.reduce_agent_gradients(params, agent_grads)
    out["agents"] = sorted(map(list, agent_grads))
    ranks.barrier()
    return out


@pytest.mark.parametrize("gpus", [2, 1], ids=["each-task-sees-2-gpus", "each-task-sees-1-gpu"])
def test_two_ranks_every_collective_is_served_by_the_gpu_backend(tmp_path: Path, gpus: int) -> None:
    """Two gloo processes playing a 2-GPU job: the backend the trainer configures on GPUs serves every
    collective's tensors (a plain "nccl" group would meet `sum_floats`' CPU float64 tensor), and each rank
    sets a GPU it can see (not set_device(local_rank): cuda:1 in a task that sees one GPU)."""
    ctx, port = torch.multiprocessing.get_context("spawn"), free_port()
    procs = [ctx.Process(target=collectives_worker, args=(r, port, gpus, str(tmp_path))) for r in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=180)
    for p in procs:
        if p.is_alive():
            p.kill()
    records = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r, rec in enumerate(records):
        assert rec["outcome"] == "ok", (r, rec)
        assert rec["backend"] == "cuda:nccl,cpu:gloo" and rec["set_device"] == [r % gpus]
        assert rec["device"] == f"cuda:{r % gpus}"
        res = rec["results"]
        assert res["gathered"] == [0, 1, 1] and res["sums"] == [2.0, 1.0]
        assert (res["all_true"], res["any_true"]) == (False, True)
        assert res["stats"] == {"generator": {"loss": 1.0, "entropy": 0.5, "kl": 0.0, "clipped": 0.0, "tokens": 2.0}}
        assert res["broadcast"] == 1.0 and res["grad"] == 3.0 and res["roles"] == ["generator"]
        assert res["agents"] == [["generator", 0], ["generator", 1]]
        # the float sums really went through a collective on CPU tensors, which the GPU backend serves
        assert ["all_reduce", "cpu"] in rec["calls"] and ["all_gather_object", "cpu"] in rec["calls"]


def test_the_two_rank_run_covers_every_collective_of_the_trainer() -> None:
    """Every collective the trainer makes is a method of Ranks (no other module of trainer/ touches
    torch.distributed), and `exercise` calls each of them: the run above checks them all."""
    import ast
    import inspect
    import re

    from tests.workflow import ROOT
    from trainer.rl import distributed

    for path in (ROOT / "trainer").rglob("*.py"):
        if path == ROOT / "trainer" / "rl" / "distributed.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any(n.startswith("torch.distributed") for n in names), path
    collective = re.compile(r"\bdist\.|self\._sum_tensors|self\.sum_floats|self\.all_gather")
    calling = {
        name
        for name, fn in vars(distributed.Ranks).items()
        if inspect.isfunction(fn) and not name.startswith("__") and collective.search(inspect.getsource(fn))
    }
    exercised = set(re.findall(r"ranks\.(\w+)\(", inspect.getsource(exercise)))
    assert calling - {"_sum_tensors"} <= exercised, calling - exercised


# -- the GPU a task sees -----------------------------------------------------------------------


def test_device_is_the_local_rank_among_the_gpus_the_task_sees() -> None:
    with fake_gpus(1):  # SLURM --gpus-per-task: each task sees its own GPU as cuda:0
        assert [device_of(Ranks(r, 4, r)) for r in range(4)] == ["cuda:0"] * 4
    with fake_gpus(4):  # each task sees the node's 4 GPUs
        assert [device_of(Ranks(r, 4, r)) for r in range(4)] == [f"cuda:{r}" for r in range(4)]
    with fake_gpus(2):  # 4 tasks a node, 2 visible to each (pairs): 0, 1, 0, 1
        assert [device_of(Ranks(r, 4, r)) for r in range(4)] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    assert device_of(Ranks(1, 2, 1)) == "cpu"  # no GPU
    from trainer.rl.distributed import device_index  # what process_group's set_device and the engine use

    with fake_gpus(4):
        assert device_index(Ranks(5, 8, 1)) == 1
