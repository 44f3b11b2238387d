"""Models and datasets fetched on the login node, so that train jobs run offline.

    python -m trainer prefetch --model Qwen/Qwen3-0.6B --out results/prefetch/models/qwen3-0.6b.json
    python -m trainer prefetch --dataset open-r1/DAPO-Math-17k-Processed --out results/prefetch/datasets/X.json

A hub id is downloaded into the Hugging Face cache and its revision resolved to a commit hash
(the snapshot folder's name); a local path is hashed by content instead. config.yaml may pin the
commit (`scales.<scale>.revision`, a hub dataset source's `revision`; `python -m trainer pin` writes
them): prefetch then fetches that commit and fails when the hub resolves another, and the run's hash
depends on config.yaml alone, so two clusters with one config.yaml make runs of equal hashes. An
unpinned one takes what this cluster resolved. The launcher pins what the JSON says into the run
config (`pin_prefetched`), so the revision is part of config.json and its hash; the job checks,
before anything else, that every pinned repository is in its cache (`require_cached`) and fails at
once naming the model or dataset and the prefetch rule.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MODEL_RULE = "prefetch_model"
DATASET_RULE = "prefetch_dataset"


class PrefetchError(RuntimeError):
    """A model or dataset a job needs is not in its cache, or could not be fetched; the message says which."""


def content_hash(path: str | Path) -> str:
    """A hash of a file's or directory's content: relative file names and bytes, in sorted order."""
    root = Path(path)
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    digest = hashlib.sha256()
    for f in files:
        digest.update(str(f.relative_to(root) if f != root else f.name).encode() + b"\0")
        with open(f, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def fetch_repo(
    repo_id: str,
    repo_type: str,
    revision: str | None = None,
    cache_dir: str | None = None,
    local_files_only: bool = False,
) -> dict[str, Any]:
    """snapshot_download into the Hugging Face cache; the revision resolved to its commit hash."""
    from huggingface_hub import snapshot_download

    try:
        path = snapshot_download(
            repo_id, repo_type=repo_type, revision=revision, cache_dir=cache_dir, local_files_only=local_files_only
        )
    except Exception as e:  # hub errors have many types; all mean: not fetched
        raise PrefetchError(f"{repo_type} {repo_id} (revision {revision or 'main'}): {type(e).__name__}: {e}") from e
    return {"kind": repo_type, "name": repo_id, "revision": Path(path).name, "path": str(path)}


def prefetch(
    name: str,
    kind: str,
    revision: str | None = None,
    cache_dir: str | None = None,
    config_names: list[str] | None = None,
) -> dict[str, Any]:
    """What the prefetch rules write: a local path's content hash, or a hub repository's commit (a dataset's
    `config_names`, the configurations the runs read, each prepared and listed)."""
    if Path(name).exists():
        return {"kind": kind, "name": name, "content_hash": content_hash(name), "path": str(Path(name).resolve())}
    info = fetch_repo(name, kind, revision, cache_dir)
    if revision is not None and info["revision"] != revision:
        raise PrefetchError(
            f"{kind} {name}: the hub resolved commit {info['revision']}, config.yaml pins {revision} "
            f"(pin a full commit hash; to pin the hub's new one, delete that `revision:` and run `python -m trainer pin`)"
        )
    if kind == "dataset":
        prepare_dataset(name, info["revision"], config_names)
        if config_names:
            info["config_names"] = list(config_names)
    return info


def prepare_dataset(repo_id: str, revision: str, config_names: list[str] | None = None) -> None:
    """Build the datasets library's cache of a fetched dataset, each of `config_names` (none: its default; a
    dataset of several configurations has none), skipped offline (the test cache)."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return
    import datasets

    for config in config_names or [None]:
        datasets.load_dataset(repo_id, config, revision=revision)


def dataset_config_names(specs: list[dict[str, Any]], repo_id: str) -> list[str]:
    """The configurations of hub dataset `repo_id` that `specs` read, in order, once each (a spec's
    `config_name` may be one name or a list)."""
    names: list[str] = []
    for spec in specs:
        value = spec.get("config_name") if spec.get("path") == repo_id else None
        names += [n for n in (value if isinstance(value, list) else [value]) if n is not None and n not in names]
    return names


def hf_dataset_specs(task_params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The task's train and eval specs that load from the hub (source: hf)."""
    for spec in [task_params.get("train") or {}, *(task_params.get("eval") or [])]:
        if spec.get("source") == "hf":
            yield spec


def dataset_key(repo_id: str) -> str:
    """The file name of a dataset's prefetch JSON (the Hugging Face cache's own spelling of the id)."""
    return repo_id.replace("/", "--")


def needs_model_prefetch(model: str) -> bool:
    """Whether a scale's model is a hub id (`tiny` is built offline; a local path is hashed, not fetched)."""
    return model != "tiny"


def pinned_revision(specs: list[dict[str, Any]], repo_id: str, where: str) -> str | None:
    """The one revision that the sources reading hub dataset `repo_id` pin (None: unpinned)."""
    found = {s.get("revision") for s in specs if s.get("path") == repo_id}
    if len(found) > 1:
        raise ValueError(
            f"{where}: dataset {repo_id} is pinned to several revisions {sorted(map(str, found))}; "
            f"give every source of it the same `revision`"
        )
    return next(iter(found), None)


def revision_arg(revision: str | None) -> str:
    """The prefetch command's ` --revision COMMIT` (a leading space) of a pinned commit (empty: unpinned)."""
    return f" --revision {revision}" if revision else ""


def check_pin(pinned: str | None, doc: dict[str, Any], run: str) -> None:
    """A prefetch JSON of another commit than the config pins (fetched before the pin): fetch again."""
    if pinned is not None and "revision" in doc and doc["revision"] != pinned:
        raise PrefetchError(
            f"run {run}: {doc['kind']} {doc['name']}: config.yaml pins {pinned}, the prefetch JSON "
            f"holds {doc['revision']}; run the prefetch rule again (delete results/prefetch/ of it)"
        )


def pin_prefetched(run_config: dict[str, Any], prefetched: list[dict[str, Any]]) -> dict[str, Any]:
    """The run config with the prefetched revisions and content hashes in its hashed sections
    (model, task_params): a new revision is a new config hash; a revision config.yaml pins must be the one
    prefetched (so the hash of a pinned config is the config's alone)."""
    cfg = {
        **run_config,
        "model": dict(run_config["model"]),
        "task_params": {
            **run_config["task_params"],
            "train": dict(run_config["task_params"].get("train") or {}),
            "eval": [dict(s) for s in run_config["task_params"].get("eval") or []],
        },
    }
    for doc in prefetched:
        pin = {k: doc[k] for k in ("revision", "content_hash") if k in doc}
        if doc["kind"] == "model" and doc["name"] == cfg["model"]["name"]:
            check_pin(cfg["model"].get("revision"), doc, cfg["run"])
            cfg["model"].update(pin)
        elif doc["kind"] == "dataset":
            for spec in hf_dataset_specs(cfg["task_params"]):
                if spec.get("path") == doc["name"]:
                    check_pin(spec.get("revision"), doc, cfg["run"])
                    spec.update(pin)
    return cfg


def require_cached(run_config: dict[str, Any], cache_dir: str | None = None) -> None:
    """Fail at once, naming the model or dataset and its prefetch rule, when a job would need the network."""
    model = run_config["model"]
    wanted = []
    if needs_model_prefetch(model["name"]) and not Path(model["name"]).exists():
        wanted.append(("model", model["name"], model.get("revision"), MODEL_RULE, f"models/{run_config['scale']}"))
    for spec in hf_dataset_specs(run_config["task_params"]):
        wanted.append(
            ("dataset", spec["path"], spec.get("revision"), DATASET_RULE, f"datasets/{dataset_key(spec['path'])}")
        )
    for kind, name, revision, rule, target in wanted:
        where = (
            f"train jobs run offline (HF_HUB_OFFLINE=1): run the `{rule}` rule on the login node first "
            f"(snakemake results/prefetch/{target}.json; the sweep runs it before `train`)"
        )
        if revision is None:
            raise PrefetchError(f"run {run_config['run']}: {kind} {name} has no pinned revision; {where}")
        try:
            fetch_repo(name, kind, revision, cache_dir, local_files_only=True)
        except PrefetchError as e:
            raise PrefetchError(
                f"run {run_config['run']}: {kind} {name} revision {revision} is not in the Hugging "
                f"Face cache ({e}); {where}"
            ) from e


def use_hf_home(config: dict[str, Any]) -> None:
    """Point the Hugging Face cache of this process, and of every job it starts, at the config's `hf_home`
    (a scratch file system); without it, the environment's HF_HOME stands."""
    if config.get("hf_home"):
        os.environ["HF_HOME"] = str(config["hf_home"])
