"""rules/config.schema.yaml is generated from the typed settings (trainer/settings/schema.py), and a
difference in any setting's default, type, help or constraint between the two fails here, naming it.

Also: the schema constrains every leaf, every setting has help, and config.yaml's runs read into settings.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from analysis.settings import AnalysisSettings
from trainer import settings as ts
from trainer.settings import schema
from trainer.sweep.config import expand_matrix, load_config, load_yaml, resolve_run_config

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_PATH = ROOT / "rules" / "config.schema.yaml"
SCHEMA = load_yaml(SCHEMA_PATH)
CONSTRAINTS = ("type", "enum", "const", "$ref", "oneOf", "anyOf", "allOf")
CONTAINERS = ("properties", "additionalProperties", "items", "$defs", "allOf", "oneOf", "anyOf", "then", "else")


def test_committed_schema_is_the_generated_one() -> None:
    """Each setting's default, type, help (`description`) and constraints in the committed schema are those of
    its typed field; the text too (run `python -m trainer.settings.schema` after changing a setting)."""
    generated = schema.generate()
    problems = schema.differences(SCHEMA, generated)
    assert not problems, (
        "rules/config.schema.yaml differs from the typed settings (run `python -m trainer.settings.schema`):\n"
        + "\n".join(problems)
    )
    diff = schema.text_differences(SCHEMA_PATH.read_text(), schema.render(generated))
    assert not diff, (
        "rules/config.schema.yaml is not formatted as generated (run `python -m trainer.settings.schema`):\n"
        + "\n".join(diff[:40])
    )


@dataclass(frozen=True)
class _Committed:
    """A settings class as the committed schema was generated from."""

    rate: float = ts.setting(1e-6, "AdamW learning rate.", gt=0)
    steps: int = ts.setting(300, "Training steps.", ge=1)
    backend: str = ts.setting("hf", "Rollout backend.", choices=("hf", "vllm"))


@dataclass(frozen=True)
class _Typed:
    """A settings class as the typed settings now have it."""

    rate: float = ts.setting(2e-5, "AdamW learning rate.", gt=0)  # another default
    steps: float = ts.setting(300.0, "Training steps (at most).", ge=1)  # another type and help
    backend: str = ts.setting("hf", "Rollout backend.", choices=("hf", "vllm", "sglang"))  # another choice


def test_differences_name_each_setting_that_differs() -> None:
    """The check above can fail: a default, a type, a help text or a constraint that differs is named."""
    found = schema.differences(schema.class_schema(_Committed), schema.class_schema(_Typed))
    assert found[1:] == [
        "properties.rate.default: committed 1e-06, generated 2e-05",
        "properties.steps.type: committed 'integer', generated 'number'",
        "properties.steps.default: committed 300, generated 300.0",
        "properties.steps.description: committed 'Training steps.', generated 'Training steps (at most).'",
        "properties.backend.enum: committed ['hf', 'vllm'], generated ['hf', 'vllm', 'sglang']",
    ], found
    assert found[0].startswith("description: committed 'A settings class as the committed schema")
    assert schema.differences(schema.class_schema(_Typed), schema.class_schema(_Typed)) == []


def test_a_changed_setting_in_the_committed_schema_fails_the_check(tmp_path: Path) -> None:
    """`python -m trainer.settings.schema --check` passes the committed file and fails one with a changed default."""
    assert schema.main(["--check"]) == 0
    changed = copy.deepcopy(schema.generate())
    changed["$defs"]["training"]["properties"]["learning_rate"]["default"] = 1e-6
    path = tmp_path / "config.schema.yaml"
    path.write_text(schema.render(changed))
    assert schema.main(["--check", "--out", str(path)]) == 1
    assert schema.differences(changed, schema.generate()) == [
        "$defs.training.properties.learning_rate.default: committed 1e-06, generated 2e-05"
    ]


def test_a_value_outside_its_choices_is_refused_naming_it() -> None:
    """The choices the schema lists are the ones the typed settings accept (one definition)."""
    with pytest.raises(ts.SettingsError, match=r"training.generation_backend: 'sglang' is not one of hf, vllm"):
        ts.from_dict(ts.TrainingSettings, {"generation_backend": "sglang"}, "training")
    generated = SCHEMA["$defs"]["training"]["properties"]["generation_backend"]["enum"]
    assert generated == list(ts.GENERATION_BACKENDS)


def test_each_allowed_backend_has_its_builder() -> None:
    """The rollout backends and trackers the settings allow are the ones the trainer builds (one list each)."""
    from trainer.rl import rollout, tracking

    assert set(rollout.BUILDERS) == set(ts.GENERATION_BACKENDS)
    assert set(tracking.BACKEND_CLASSES) | {"none"} == set(ts.TRACKING_BACKENDS)


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
    node = {"properties": {"seeds": {"description": "Seeds., type: array, items: {type: integer}"}}}
    assert [p for p, s in leaves(node, "") if not any(k in s for k in CONSTRAINTS)] == [".seeds"]


def test_every_setting_has_help() -> None:
    classes = [getattr(ts, name) for name in ts.__all__ if dataclasses.is_dataclass(getattr(ts, name))]
    assert len(classes) >= 12
    for cls in [*classes, AnalysisSettings]:
        missing = [f.name for f in dataclasses.fields(cls) if not f.metadata.get("help")]
        assert not missing, f"{cls.__name__}: fields without help: {missing}"


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
