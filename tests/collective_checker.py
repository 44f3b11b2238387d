"""GPU rules of torch.distributed, checked on CPU.

`fake_gpus(n)` makes this process look like a GPU node that shows it `n` devices:
torch.cuda.is_available, device_count, current_device, and set_device, which refuses an index the
process cannot see, as CUDA does ("invalid device ordinal").

`checked_collectives()` records the backend the code asks `init_process_group` for and starts gloo
in its place (this machine has CPU tensors only), then fails every collective whose tensor sits on
a device type that the recorded backend cannot serve, as NCCL does ("No backend type associated
with device type cpu"): "nccl" serves cuda only, "gloo" cpu (and cuda), a device-keyed string
such as "cuda:nccl,cpu:gloo" the device types it names (torch's own table, `served_device_types`).
Object collectives and barrier need no tensor of the caller's: torch runs them on the CPU where the
group has a CPU backend, else on the current CUDA device, which the checker then requires to have
been set (each rank its own GPU, as torch's docs ask). What only a GPU shows (NCCL itself, its
speed, a real device's memory) stays for the device check (benchmarks/device_check.sh).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import torch
import torch.distributed as dist

TENSOR_COLLECTIVES = (
    "all_reduce",
    "broadcast",
    "all_gather",
    "all_gather_into_tensor",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
    "gather",
    "scatter",
    "send",
    "recv",
    "isend",
    "irecv",
)
OBJECT_COLLECTIVES = ("all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list", "barrier")


class CollectiveDeviceError(RuntimeError):
    """A collective whose tensor the configured backend cannot serve (on a GPU node it would fail there)."""


def served_device_types(backend: str) -> set[str]:
    """The device types a backend string serves: "nccl" -> {cuda}; "gloo" -> {cpu, cuda};
    "<device>:<backend>,..." -> the devices it names."""
    backend = str(backend).lower()
    if ":" in backend:
        return {pair.split(":")[0].strip() for pair in backend.split(",")}
    return set(dist.Backend.backend_capability[backend])


@dataclass
class FakeGpus:
    """What `fake_gpus` shows the process, and the device it was told to use."""

    count: int
    current: int | None = None
    set_calls: list[int] = field(default_factory=list)

    def set_device(self, device: Any) -> None:
        index = device if isinstance(device, int) else torch.device(device).index or 0
        self.set_calls.append(index)
        if not 0 <= index < self.count:
            raise RuntimeError(
                f"CUDA error: invalid device ordinal (set_device({index}) in a process that sees {self.count} GPU(s))"
            )
        self.current = index


@contextlib.contextmanager
def fake_gpus(count: int) -> Iterator[FakeGpus]:
    """This process looks like a node with `count` visible GPUs (no CUDA tensor can be made, though)."""
    gpus = FakeGpus(count)
    with (
        mock.patch.object(torch.cuda, "is_available", lambda: True),
        mock.patch.object(torch.cuda, "device_count", lambda: count),
        mock.patch.object(torch.cuda, "set_device", gpus.set_device),
        mock.patch.object(torch.cuda, "current_device", lambda: 0 if gpus.current is None else gpus.current),
    ):
        yield gpus


@dataclass
class Checker:
    """The backend the code configured, and the device types each collective used."""

    backend: str | None = None
    calls: list[tuple[str, str]] = field(default_factory=list)  # (collective, device type)
    gpus: FakeGpus | None = None

    def check_tensor(self, name: str, tensor: Any) -> None:
        tensors = tensor if isinstance(tensor, (list, tuple)) else [tensor]
        for t in tensors:
            if isinstance(t, (list, tuple)):
                for x in t:
                    self.check_tensor(name, x)
                continue
            if not isinstance(t, torch.Tensor):
                continue
            self.calls.append((name, t.device.type))
            if self.backend is not None and t.device.type not in served_device_types(self.backend):
                raise CollectiveDeviceError(
                    f"{name} of a {t.device.type} tensor on a group whose backend is "
                    f"{self.backend!r}: no backend serves device type {t.device.type} "
                    f"(it serves {sorted(served_device_types(self.backend))})"
                )

    def check_objects(self, name: str) -> None:
        if self.backend is None:
            return
        served = served_device_types(self.backend)
        device = "cpu" if "cpu" in served else sorted(served)[0]
        self.calls.append((name, device))
        if device == "cuda" and (self.gpus is None or self.gpus.current is None):
            raise CollectiveDeviceError(
                f"{name} on a {self.backend!r} group runs on the current CUDA device, but "
                "torch.cuda.set_device was never called: every rank would use cuda:0"
            )


@contextlib.contextmanager
def checked_collectives(gpus: FakeGpus | None = None) -> Iterator[Checker]:
    """Record init_process_group's backend (gloo underneath) and check every collective against it."""
    checker = Checker(gpus=gpus)
    real_init = dist.init_process_group

    def init(backend: Any = None, *args: Any, **kwargs: Any) -> None:
        checker.backend = str(backend) if backend is not None else None
        kwargs.pop("device_id", None)  # a CUDA device id: there is none here
        return real_init("gloo", *args, **kwargs)

    def tensor_wrapper(name: str, real: Any) -> Any:
        def wrapped(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            checker.check_tensor(name, tensor)
            for a in args:  # e.g. all_gather(tensor_list, tensor): the input is the second argument
                if isinstance(a, (torch.Tensor, list, tuple)):
                    checker.check_tensor(name, a)
            return real(tensor, *args, **kwargs)

        return wrapped

    def object_wrapper(name: str, real: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            checker.check_objects(name)
            return real(*args, **kwargs)

        return wrapped

    patches = [mock.patch.object(dist, "init_process_group", init)]
    patches += [
        mock.patch.object(dist, n, tensor_wrapper(n, getattr(dist, n))) for n in TENSOR_COLLECTIVES if hasattr(dist, n)
    ]
    patches += [
        mock.patch.object(dist, n, object_wrapper(n, getattr(dist, n))) for n in OBJECT_COLLECTIVES if hasattr(dist, n)
    ]
    with contextlib.ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        yield checker
