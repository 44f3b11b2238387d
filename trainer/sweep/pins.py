"""`python -m trainer pin`: the hub commits of config.yaml's models and datasets written into config.yaml.

    python -m trainer pin                      # config.yaml, the commits of results/prefetch/ (else the hub's)
    python -m trainer pin --config my.yaml --prefetched /scratch/results/prefetch

A scale's model (a hub id) gets `revision: <commit>` beside its `model:`, a hub dataset source beside its
`path:`. A commit comes from the source's prefetch JSON when there is one (what this cluster fetched), else
from the hub (its current commit of main). Pinned sources are left as they are. The file is edited in place
(comments kept) and read back: every source must then name its commit and nothing else may have changed.
With every source pinned, a run's config hash depends on config.yaml alone (trainer/sweep/prefetch.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from trainer.sweep.prefetch import PrefetchError, dataset_key, hf_dataset_specs, needs_model_prefetch


def hub_sources(config: dict[str, Any]) -> list[dict[str, Any]]:
    """Every hub model of `scales` and hub dataset of `tasks`: kind, name, pinned revision, its prefetch JSON."""
    out: list[dict[str, Any]] = []
    for scale, entry in (config.get("scales") or {}).items():
        if needs_model_prefetch(entry["model"]) and not Path(entry["model"]).exists():
            out.append(
                {
                    "kind": "model",
                    "name": entry["model"],
                    "revision": entry.get("revision"),
                    "json": f"models/{scale}.json",
                    "where": f"scales.{scale}",
                }
            )
    for task, entry in (config.get("tasks") or {}).items():
        for spec in hf_dataset_specs(entry):
            if not any(s["kind"] == "dataset" and s["name"] == spec["path"] for s in out):
                out.append(
                    {
                        "kind": "dataset",
                        "name": spec["path"],
                        "revision": spec.get("revision"),
                        "json": f"datasets/{dataset_key(spec['path'])}.json",
                        "where": f"tasks.{task}",
                    }
                )
    return out


def hub_commit(kind: str, name: str) -> str:
    """The commit the hub's main branch of `name` is at now."""
    from huggingface_hub import HfApi

    try:
        return HfApi().repo_info(name, repo_type=kind).sha
    except Exception as e:  # hub errors have many types; all mean: not resolved
        raise PrefetchError(
            f"{kind} {name}: its commit could not be resolved on the hub ({type(e).__name__}: {e}); "
            f"run its prefetch rule first, or write `revision:` into the config by hand"
        ) from e


def resolve(source: dict[str, Any], prefetched: Path) -> str:
    """The commit of an unpinned source: its prefetch JSON's, else the hub's."""
    path = prefetched / source["json"]
    if path.exists():
        doc = json.loads(path.read_text())
        if doc.get("name") == source["name"] and doc.get("revision"):
            return doc["revision"]
    return hub_commit(source["kind"], source["name"])


def insert_pins(text: str, pins: dict[tuple[str, str], str]) -> str:
    """config.yaml's text with `revision: <commit>` beside each pinned model's `model:` and dataset's `path:`
    (block or flow style, quoted: an all-digit commit is a string too); comments and layout kept."""
    for (kind, name), commit in pins.items():
        key = "model" if kind == "model" else "path"
        value = rf"(?:{re.escape(name)}|'{re.escape(name)}'|\"{re.escape(name)}\")"
        block = re.compile(rf"^(?P<indent>[ \t]*(?:- )?){key}:[ \t]*{value}[ \t]*(?:#.*)?$", re.MULTILINE)
        text = block.sub(lambda m, c=commit: f'{m.group(0)}\n{" " * len(m.group("indent"))}revision: "{c}"', text)
        flow = re.compile(rf"([{{,][ \t]*{key}:[ \t]*{value})([ \t]*[,}}])")
        text = flow.sub(lambda m, c=commit: f'{m.group(1)}, revision: "{c}"{m.group(2)}', text)
    return text


def without_revisions(node: Any) -> Any:
    """A parsed config with every `revision` key left out (what pinning may not change)."""
    if isinstance(node, dict):
        return {k: without_revisions(v) for k, v in node.items() if k != "revision"}
    if isinstance(node, list):
        return [without_revisions(v) for v in node]
    return node


def pin_config(config_path: str | Path, prefetched: str | Path) -> dict[str, str]:
    """Write the commit of every unpinned hub source into the config file; return `where -> commit` written."""
    config_path = Path(config_path)
    text = config_path.read_text()
    config = yaml.safe_load(text) or {}
    todo = [s for s in hub_sources(config) if not s["revision"]]
    pins = {(s["kind"], s["name"]): resolve(s, Path(prefetched)) for s in todo}
    if not pins:
        return {}
    new_text = insert_pins(text, pins)
    new = yaml.safe_load(new_text) or {}
    placed = {(s["kind"], s["name"]): s["revision"] for s in hub_sources(new)}
    missed = [f"{kind} {name}" for (kind, name), commit in pins.items() if placed.get((kind, name)) != commit]
    if missed or without_revisions(new) != without_revisions(config):
        raise ValueError(
            f"{config_path}: could not place `revision:` for {missed or 'every source'} in its text; "
            f"add them by hand: {json.dumps({f'{k} {n}': c for (k, n), c in pins.items()})}"
        )
    config_path.write_text(new_text)
    return {s["where"] + f" ({s['kind']} {s['name']})": pins[(s["kind"], s["name"])] for s in todo}
