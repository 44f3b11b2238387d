"""docs/configuration.md is generated from the config schema (trainer/sweep/config_docs.py) and kept current."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from trainer.sweep import config_docs

ROOT = Path(__file__).resolve().parents[1]
# mappings whose keys are names chosen in config.yaml (a matrix, a scale, ...), not keys of the schema
NAMED_ENTRIES = {"matrices", "scales", "workflows", "tasks", "variants", "env", "params", "sbatch_extra", "signatures"}


def test_committed_page_is_the_generated_one() -> None:
    committed = config_docs.PAGE.read_text()
    assert committed == config_docs.render_page(), (
        "docs/configuration.md differs from the schema's: run python -m trainer.sweep.config_docs"
    )


def test_check_fails_on_a_stale_page(tmp_path: Path) -> None:
    page = tmp_path / "configuration.md"
    assert config_docs.main(["--out", str(page)]) == 0
    assert config_docs.main(["--check", "--out", str(page)]) == 0
    page.write_text(page.read_text().replace("LoRA rank.", "LoRA rank (edited by hand)."))
    assert config_docs.main(["--check", "--out", str(page)]) == 1


def _keys(node: object, parent: str = "") -> set[str]:
    """Every key config.yaml sets, by name (the names of named entries left out, their keys kept)."""
    out: set[str] = set()
    if isinstance(node, dict):
        for key, sub in node.items():
            if parent not in NAMED_ENTRIES:
                out.add(str(key))
            out |= _keys(sub, "" if parent in NAMED_ENTRIES else str(key))
    elif isinstance(node, list):
        for sub in node:
            out |= _keys(sub, parent)
    return out


def test_every_key_of_config_yaml_is_documented() -> None:
    cells = re.findall(r"^\| `([^`]+)` \|", config_docs.PAGE.read_text(), re.M)
    documented = {cell.removesuffix("[]").rsplit(".", 1)[-1] for cell in cells}
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    missing = sorted(_keys(config) - documented)
    assert not missing, f"config.yaml keys with no row in docs/configuration.md: {missing}"


SMALL_SCHEMA = {
    "$defs": {
        "resources": {
            "description": "What a job asks for.",
            "type": "object",
            "properties": {"gpus": {"type": "integer", "minimum": 0, "default": 1, "description": "GPUs."}},
        }
    },
    "properties": {
        "matrix": {"type": "string", "description": "The matrix to run."},
        "scales": {
            "type": "object",
            "additionalProperties": {"type": "object", "properties": {"resources": {"$ref": "#/$defs/resources"}}},
        },
        "launcher": {"type": "object", "properties": {"resources": {"$ref": "#/$defs/resources"}}},
    },
}


def test_a_shared_block_is_one_section_linked_from_each_use() -> None:
    page = config_docs.SchemaPage(SMALL_SCHEMA).build()
    assert page.count("## resources") == 1
    assert "Used at `scales.<name>.resources`, `launcher.resources`." in page
    assert "| `gpus` | integer (>= 0) | `1` | GPUs. |" in page
    assert "| `matrix` | string |  | The matrix to run. |" in page
    assert "| `launcher.resources` | see [resources](#resources) |" in page


def test_a_description_cut_by_an_unquoted_comma_is_an_error() -> None:
    # YAML reads `{description: a, b}` as two keys: the description `a` and a key `b`
    schema = yaml.safe_load("properties:\n  x: {type: integer, description: Steps, at most.}\n")
    with pytest.raises(ValueError, match=r"properties\.x: 'at most\.' is no schema keyword"):
        config_docs.SchemaPage(schema).build()
