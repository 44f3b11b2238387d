"""The schema constrains every leaf, and it names the same keys as the typed settings (no drift).

The schema stays hand-written YAML (Snakemake validates config.yaml against it, and its per-source
if/then and cross-reference rules read best there); these tests tie it to trainer/settings.py and
analysis/settings.py instead of deriving one from the other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from analysis.settings import AnalysisSettings
from trainer import settings as ts
from trainer.sweep.config import expand_matrix, load_config, load_yaml, resolve_run_config

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = load_yaml(ROOT / "rules" / "config.schema.yaml")
CONSTRAINTS = ("type", "enum", "const", "$ref", "oneOf", "anyOf", "allOf")
CONTAINERS = ("properties", "additionalProperties", "items", "$defs", "allOf", "oneOf", "anyOf", "then", "else")


def leaves(node: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every property schema that describes a value (not a container of further property schemas)."""
    if not isinstance(node, dict):
        return
    for name, sub in node.get("properties", {}).items():
        if isinstance(sub, dict):
            yield f"{path}.{name}", sub
        yield from leaves(sub, f"{path}.{name}")
    for key in ("additionalProperties", "items", "then", "else"):
        if isinstance(node.get(key), dict):
            yield from leaves(node[key], f"{path}.{key}")
    for key in ("allOf", "oneOf", "anyOf"):
        for i, sub in enumerate(node.get(key, [])):
            yield from leaves(sub, f"{path}.{key}[{i}]")
    for name, sub in node.get("$defs", {}).items():
        yield f"$defs.{name}", sub
        yield from leaves(sub, f"$defs.{name}")


def test_every_leaf_has_a_constraint() -> None:
    """A leaf with only a description (the old `"Seeds., type: array"` strings) fails here."""
    found = list(leaves(SCHEMA, ""))
    assert len(found) > 100
    bare = [path for path, sub in found if not any(k in sub for k in CONSTRAINTS) and "if" not in sub]
    assert not bare, f"schema leaves without a type, enum or $ref: {bare}"


def test_the_walker_finds_a_bare_leaf() -> None:
    """The check above can fail: a description-only leaf is reported."""
    schema = {"properties": {"seeds": {"description": "Seeds., type: array, items: {type: integer}"}}}
    assert [p for p, s in leaves(schema, "") if not any(k in s for k in CONSTRAINTS)] == [".seeds"]


def _props(*path: str) -> set[str]:
    node: Any = SCHEMA
    for key in path:
        node = node[key]
    return set(node["properties"])


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


@pytest.mark.parametrize(
    "schema_path, cls",
    [
        (("$defs", "training"), ts.TrainingSettings),
        (("$defs", "training", "properties", "lora"), ts.LoraSettings),
        (("$defs", "resources"), ts.ResourceSettings),
        (("$defs", "data_source"), ts.SourceSettings),
        (("$defs", "task"), ts.TaskSettings),
        (("properties", "launcher"), ts.LauncherSettings),
        (("properties", "workflows", "additionalProperties"), ts.WorkflowSettings),
        (("properties", "analysis"), AnalysisSettings),
        (("properties", "scales", "additionalProperties", "properties", "tiny"), ts.TinySettings),
    ],
    ids=lambda x: x.__name__ if isinstance(x, type) else ".".join(x),
)
def test_schema_and_settings_name_the_same_keys(schema_path: tuple[str, ...], cls: type) -> None:
    """A key added to one and not the other fails here, naming it."""
    schema, fields = _props(*schema_path), _fields(cls)
    assert schema - fields == set(), f"in the schema only: {sorted(schema - fields)}"
    assert fields - schema == set(), f"in {cls.__name__} only: {sorted(fields - schema)}"


def test_every_setting_has_help() -> None:
    for cls in (
        ts.TrainingSettings,
        ts.LoraSettings,
        ts.ResourceSettings,
        ts.LauncherSettings,
        ts.WorkflowSettings,
        ts.SourceSettings,
        ts.TaskSettings,
        ts.ModelSettings,
        ts.TinySettings,
        ts.RunSettings,
        AnalysisSettings,
    ):
        missing = [f.name for f in dataclasses.fields(cls) if not f.metadata.get("help")]
        assert not missing, f"{cls.__name__}: fields without help: {missing}"


def test_source_types_agree() -> None:
    """The schema's per-source rules (source_fields) and settings.SOURCE_FIELDS are the same table."""
    rules = {}
    for rule in SCHEMA["$defs"]["source_fields"]["allOf"]:
        kind = rule["if"]["properties"]["source"]["const"]
        takes = set(rule["then"]["propertyNames"]["enum"]) - set(ts.COMMON_SOURCE_FIELDS)
        rules[kind] = (set(rule["then"].get("required", [])), takes)
    assert rules == {k: (set(need), set(take)) for k, (need, take) in ts.SOURCE_FIELDS.items()}
    assert set(SCHEMA["$defs"]["data_source"]["properties"]["source"]["enum"]) == set(ts.SOURCE_FIELDS)


def test_every_run_of_config_yaml_reads_into_settings() -> None:
    config = load_config(ROOT / "config.yaml", ROOT / "rules" / "config.schema.yaml")
    for matrix in config["matrices"]:
        for run in expand_matrix(config, matrix):
            settings = ts.RunSettings.from_dict(resolve_run_config(config, run))
            assert settings.training.max_completion_length is not None
    assert AnalysisSettings.from_dict(config["analysis"]).smoothing_window == config["analysis"]["smoothing_window"]


@pytest.mark.parametrize(
    "patch, fragment",
    [
        ({"training": {"learning_rat": 1}}, "<run>.training.learning_rat: unknown key"),
        ({"training": {"epsilon_high": 0.1}}, "training.epsilon_high (0.1) is below training.epsilon"),
        ({"model": {"name": "tiny", "dtype": "float32", "tiny": None}}, "set scales.tiny.tiny"),
        (
            {"task_params": {"train": {"source": "hf", "split": "train"}}},
            "tasks.math.train: a hf source needs ['path']",
        ),
        ({"launcher": {"poll_interval": 1}}, "<run>.launcher.poll_interval: unknown key"),
    ],
)
def test_settings_errors_name_the_key(patch: dict[str, Any], fragment: str) -> None:
    config = load_config(ROOT / "config.yaml", ROOT / "rules" / "config.schema.yaml")
    run = resolve_run_config(config, expand_matrix(config)[0])
    for section, values in patch.items():
        run[section] = {**run[section], **values}
    with pytest.raises(ts.SettingsError) as err:
        ts.RunSettings.from_dict(run)
    assert fragment in str(err.value)
