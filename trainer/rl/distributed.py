"""Data-parallel training over a job's processes: one process per GPU (NCCL for CUDA tensors, gloo for
CPU ones: `backend_for`), or `resources.processes` processes on CPU (gloo).

Processes are submitit tasks (`tasks_per_node`, see trainer/sweep/launch.py), not torchrun inside
the job: submitit already owns each task's life (its signal handler checkpoints and requeues the job
on SLURM's timeout or preemption, its result files carry errors back to the launcher), and its
JobEnvironment gives every task its rank, the world size and the master's host. A torchrun between
SLURM and the trainer would be a second supervisor that SLURM's signal does not reach as submitit
expects. `python -m trainer train` and the debug backend run one process: `Ranks.single()`.

What is split and what is shared, per step:
- rollouts: each rank rolls out a contiguous share of the step's prompts (`shard`, all
  generations of a prompt on one rank) with a seed of its own (`rank_seed`); the episodes are
  gathered in rank order (`all_gather`), so every rank then holds the step's whole batch, in
  the one-process order, and computes the same rewards, advantages and log rows;
- the update: each rank back-propagates its share of each policy's rows, its loss normalised by
  the whole batch's sizes (`batch_totals`); `reduce_gradients` sums the trainable parameters'
  gradients (the LoRA adapters) and the per-role gradients of the GradientRecorder (and
  `reduce_agent_gradients` its per-agent ones), so the clip, the optimizer step and the gradient
  metrics see the one-process gradient;
- eval: problems are sharded the same way and the episodes gathered;
- files: rank 0 alone writes logs, checkpoints and progress; every rank resumes from them.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from trainer.rl.processes import world_size_of

T = TypeVar("T")


class DistributedError(RuntimeError):
    """The job's processes do not match the run's resources, or the process group cannot start."""


@dataclass(frozen=True)
class Ranks:
    """Where this process stands in the run's process group."""

    rank: int
    world_size: int
    local_rank: int

    @staticmethod
    def single() -> Ranks:
        return Ranks(0, 1, 0)

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes files and logs."""
        return self.rank == 0

    @property
    def active(self) -> bool:
        """More than one process: collectives are needed."""
        return self.world_size > 1

    # -- splitting the work ------------------------------------------------------------------
    def shard(self, items: Sequence[T]) -> list[T]:
        """This rank's contiguous share of `items` (the first ranks get one more when it does not
        divide); the shares of ranks 0..n-1, concatenated, are `items` in order."""
        lo, hi = shard_bounds(len(items), self.rank, self.world_size)
        return list(items[lo:hi])

    def all_gather(self, mine: list[T]) -> list[T]:
        """Every rank's list, concatenated in rank order, on every rank (pickled objects)."""
        if not self.active:
            return list(mine)
        parts: list[Any] = [None] * self.world_size
        dist.all_gather_object(parts, mine)
        return [x for part in parts for x in part]

    # -- reductions ---------------------------------------------------------------------------
    def sum_floats(self, values: list[float]) -> list[float]:
        """Element-wise sum over ranks, in float64."""
        if not self.active:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t.tolist()

    def all_true(self, flag: bool) -> bool:
        """Whether `flag` holds on every rank."""
        return self.sum_floats([0.0 if flag else 1.0])[0] == 0

    def any_true(self, flag: bool) -> bool:
        """Whether `flag` holds on some rank (e.g. a stop signal: every rank stops at the same step)."""
        return self.sum_floats([1.0 if flag else 0.0])[0] > 0

    def reduce_role_stats(self, stats: dict[str, dict[str, float]], roles: list[str]) -> None:
        """Sum each role's accumulated loss terms over ranks, in place; a role no rank saw stays absent."""
        if not self.active:
            return
        keys = ["loss", "entropy", "kl", "clipped", "tokens"]
        flat = [stats.get(r, {}).get(k, 0.0) for r in roles for k in keys] + [float(r in stats) for r in roles]
        summed = self.sum_floats(flat)
        for i, role in enumerate(roles):
            if summed[len(roles) * len(keys) + i] > 0:
                stats[role] = {**stats.get(role, {}), **dict(zip(keys, summed[i * len(keys) : (i + 1) * len(keys)]))}

    def barrier(self) -> None:
        if self.active:
            dist.barrier()

    def broadcast_params(self, params: list[torch.nn.Parameter]) -> None:
        """Rank 0's values into every rank's `params` (identical adapters before the first step)."""
        if self.active:
            with torch.no_grad():
                for p in params:
                    dist.broadcast(p.data, src=0)

    def reduce_gradients(
        self, params: list[torch.nn.Parameter], role_grads: dict[str | None, list], roles: list[str]
    ) -> None:
        """Sum `params`' gradients and the per-role gradients over ranks, in place.

        A rank without rows for a role (or without any) contributes zeros; a role that no rank
        has stays absent from `role_grads`, as in one process. Flattened into one buffer per
        reduction: one collective per policy and role instead of one per tensor.
        """
        if not self.active:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        summed = self._sum_tensors(grads)
        for p, g in zip(params, summed):
            p.grad = g
        present = self.sum_floats([1.0 if r in role_grads else 0.0 for r in roles])
        for role, n in zip(roles, present):
            if n == 0:
                continue
            mine = role_grads.get(role) or [None] * len(params)
            local = [g if g is not None else torch.zeros_like(p, dtype=torch.float32) for g, p in zip(mine, params)]
            role_grads[role] = self._sum_tensors(local)

    def reduce_agent_gradients(
        self, params: list[torch.nn.Parameter], agent_grads: dict[tuple[str, int], list]
    ) -> None:
        """Sum the per-(role, agent) gradients over ranks, in place: every (role, agent) that some rank
        has, in sorted order (a rank without it contributes zeros), so agent k means the same with any
        number of processes."""
        if not self.active:
            return
        for key in sorted(set(map(tuple, self.all_gather(list(agent_grads))))):
            mine = agent_grads.get(key) or [None] * len(params)
            local = [g if g is not None else torch.zeros_like(p, dtype=torch.float32) for g, p in zip(mine, params)]
            agent_grads[key] = self._sum_tensors(local)

    def _sum_tensors(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        flat = torch.cat([t.detach().reshape(-1).float() for t in tensors])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        out, pos = [], 0
        for t in tensors:
            out.append(flat[pos : pos + t.numel()].view_as(t).to(t.dtype))
            pos += t.numel()
        return out


def shard_bounds(n: int, rank: int, world_size: int) -> tuple[int, int]:
    """[lo, hi) of rank's contiguous share of n items."""
    base, extra = divmod(n, world_size)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


def rank_seed(seed: int, rank: int) -> int:
    """The seed of a rank's draws at a step, from the step's seed: rank 0 keeps it, so a
    one-process run draws what it always did; the others get distinct, fixed seeds."""
    return seed if rank == 0 else (seed * 1_000_033 + rank * 104_729) % 2**31


def job_ranks() -> Ranks:
    """This process's place in its submitit job (one process when not inside a submitit job)."""
    import submitit

    try:
        env = submitit.JobEnvironment()
        return Ranks(env.global_rank, env.num_tasks, env.local_rank)
    except RuntimeError:  # not a submitit job: `python -m trainer train`, the debug backend
        return Ranks.single()


@contextlib.contextmanager
def process_group(resources: dict[str, Any], run: str, timeout_min: float = 30) -> Iterator[Ranks]:
    """The run's process group for a `with` block: NCCL over GPUs (gloo for CPU tensors, `backend_for`),
    gloo on CPU; none for one process.

    Fails at once, naming the keys, when the job's tasks are not the run's `world_size_of`.
    """
    ranks, expected = job_ranks(), world_size_of(resources)
    if ranks.world_size != expected:
        raise DistributedError(
            f"run {run}: the job has {ranks.world_size} processes but resources.gpus / "
            f"resources.processes ask for {expected}; resubmit it with `python -m trainer launch`"
        )
    if not ranks.active:
        yield ranks
        return
    from submitit.helpers import TorchDistributedEnvironment

    TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
    cuda = torch.cuda.is_available()
    backend = backend_for(cuda)
    if cuda:
        torch.cuda.set_device(device_index(ranks))
    dist.init_process_group(backend, timeout=datetime.timedelta(minutes=timeout_min))
    print(
        f"[{run}] rank {ranks.rank} of {ranks.world_size} ({backend}, {os.environ['MASTER_ADDR']}:"
        f"{os.environ['MASTER_PORT']})",
        file=sys.stderr,
        flush=True,
    )
    try:
        yield ranks
    finally:
        dist.destroy_process_group()


def backend_for(cuda: bool) -> str:
    """The default group's backend: on GPUs, NCCL for CUDA tensors and gloo for CPU tensors; gloo on CPU.

    NCCL serves CUDA tensors only ("No backend type associated with device type cpu"), and some of
    what the ranks exchange lives on the CPU: `sum_floats`' float64 sums (hence `all_true`,
    `any_true`, `reduce_role_stats`, the update's batch totals) and the pickled episodes of
    `all_gather`. Rather than moving each of those to the GPU (and every future one), the group gets
    one backend per device type: init_process_group's documented "<device_type>:<backend>,..." form
    (its docstring still calls several backends experimental), which sends each collective to the
    backend of its tensors' device. It is the pair PyTorch itself builds when no backend is named, and
    the one accelerate uses for FSDP with CPU offload; the vLLM engines (external_launcher) join it. Object
    collectives and `barrier` then go through gloo (PyTorch picks the CPU when the group has it),
    with no guess of which GPU a rank owns. tests/collective_checker.py fails any collective whose
    tensor is on a device type the configured backend cannot serve (only a GPU run shows NCCL itself).
    """
    return "cuda:nccl,cpu:gloo" if cuda else "gloo"


def device_index(ranks: Ranks) -> int:
    """The index of this rank's GPU among those the process sees: its local rank where a task sees
    all of the node's GPUs, 0 where SLURM gives each task its own (--gpus-per-task, one visible device)."""
    return ranks.local_rank % max(torch.cuda.device_count(), 1)


def device_of(ranks: Ranks) -> str:
    """This rank's device: its GPU (`device_index`), or the CPU."""
    return f"cuda:{device_index(ranks)}" if torch.cuda.is_available() else "cpu"
