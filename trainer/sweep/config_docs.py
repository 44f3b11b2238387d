"""docs/configuration.md, generated from the config schema: every key with its type, default and meaning.

    python -m trainer.sweep.config_docs            # rewrite docs/configuration.md
    python -m trainer.sweep.config_docs --check    # exit 1 when the committed page differs

The schema (rules/config.schema.yaml) is the one home of a key's description, type, constraints and
default; this module only lays it out. Each top-level section gets a table; a shared block of the
schema (`$defs`: a job's resources, a data source, a task, the training settings) gets one table of
its own, linked from every place that uses it. The page depends on the schema alone: config.yaml's
values (the study's settings) are in config.yaml.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "rules" / "config.schema.yaml"
PAGE = ROOT / "docs" / "configuration.md"
# how a named entry of a mapping is written in a key path: by the $def its names follow, else by its parent
NAME_PLACEHOLDERS = {
    "scale_name": "<scale>",
    "task_name": "<task>",
    "workflow_name": "<workflow>",
    "variant_name": "<variant>",
    "matrices": "<matrix>",
}
CONSTRAINTS = {
    "minimum": ">= {}",
    "exclusiveMinimum": "> {}",
    "maximum": "<= {}",
    "exclusiveMaximum": "< {}",
    "minItems": "at least {} items",
    "minLength": "at least {} characters",
    "pattern": "matches `{}`",
}
# the JSON-schema keywords the schema uses; any other key in a node is a mistake (see check_keywords)
KEYWORDS = {
    "$schema", "$defs", "$ref", "description", "type", "enum", "const", "default", "properties",
    "additionalProperties", "propertyNames", "required", "items", "allOf", "oneOf", "if", "then", "else",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minItems", "uniqueItems", "minLength",
    "minProperties", "pattern",
}  # fmt: skip
INTRO = """\
# Configuration reference

Generated from `rules/config.schema.yaml` by `python -m trainer.sweep.config_docs`: edit the
schema's descriptions, not this page, and regenerate (`tests/test_config_docs.py` fails when the
page and the schema differ).

config.yaml is the whole experiment, validated against the schema before any job starts: an unknown
key, a bad value or an unknown workflow, task or scale fails naming the key. Override any key on the
command line (`snakemake --config 'training={learning_rate: 1.0e-5}'`), or per run with `overrides`;
matrices, overrides and variants: [matrices.md](matrices.md). In the tables, `<scale>`, `<task>`,
`<workflow>` and `<name>` stand for an entry's name and `[]` for a list's items; a default is the
schema's, where it has one. config.yaml's values are the study's settings (the demo's come from its
`overrides`).
"""


@dataclass
class Section:
    """One table of the page: its title, what it is, where it is used, its rows (key, type, default, description)."""

    title: str
    description: str = ""
    used_at: list[str] = field(default_factory=list)
    rows: list[tuple[str, ...]] = field(default_factory=list)


def _ref_name(node: dict[str, Any]) -> str | None:
    """The $def a node refers to (directly, or as the first $ref of its allOf), else None."""
    if "$ref" in node:
        return node["$ref"].rsplit("/", 1)[-1]
    refs = [n["$ref"] for n in node.get("allOf", []) if "$ref" in n]
    return refs[0].rsplit("/", 1)[-1] if refs else None


def _is_block(node: dict[str, Any]) -> bool:
    """Whether a node holds keys of its own (documented as rows below it), not a value."""
    return "properties" in node


def check_keywords(node: Any, where: str = "") -> None:
    """Raise naming the key where a schema node holds a key that is no JSON-schema keyword: YAML reads an
    unquoted comma in a flow-style description (`{description: a, b}`) as the start of another key."""
    if isinstance(node, dict):
        for key, sub in node.items():
            if where.rsplit(".", 1)[-1] not in ("properties", "$defs") and key not in KEYWORDS:
                raise ValueError(
                    f"schema {where or '(root)'}: {key!r} is no schema keyword (quote a description with commas)"
                )
            check_keywords(sub, f"{where}.{key}" if where else key)
    elif isinstance(node, list):
        for i, sub in enumerate(node):
            check_keywords(sub, f"{where}[{i}]")


class SchemaPage:
    """Walks the schema into sections of rows."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        self.defs: dict[str, Any] = schema.get("$defs", {})
        self.sections: dict[str, Section] = {}

    def block_def(self, node: dict[str, Any]) -> str | None:
        """The shared $def block a node stands for: the $def it names, or the block that $def refines (allOf)."""
        name = _ref_name(node)
        while name in self.defs and not _is_block(self.defs[name]):
            name = _ref_name(self.defs[name])
        return name if name in self.defs else None

    def resolve(self, node: dict[str, Any]) -> dict[str, Any]:
        """A node with a reference replaced by the $def it names (one level)."""
        if "$ref" in node and node["$ref"].startswith("#/properties/"):
            return self.schema["properties"][node["$ref"].rsplit("/", 1)[-1]]
        name = _ref_name(node)
        return self.defs.get(name, node)

    def type_of(self, node: dict[str, Any]) -> str:
        """A node's type in words: its JSON types, enum values, alternatives or the block it is."""
        block = self.block_def(node)
        if block is not None:
            return f"[{block}](#{block})"
        target = self.resolve(node)
        if "enum" in target:
            return "one of " + ", ".join(f"`{v}`" for v in target["enum"])
        if "const" in target:
            return f"`{target['const']}`"
        if "oneOf" in target:
            return " or ".join(self.type_of(alt) for alt in target["oneOf"])
        kinds = target.get("type", "object" if "properties" in target else "any")
        text = " or ".join(kinds) if isinstance(kinds, list) else kinds
        limits = [
            "non-empty" if k in ("minItems", "minLength") and target[k] == 1 else form.format(target[k])
            for k, form in CONSTRAINTS.items()
            if k in target
        ]
        text += f" ({', '.join(limits)})" if limits else ""
        if "array" in (kinds if isinstance(kinds, list) else [kinds]) and "items" in target:
            text = text.replace("array", "list", 1) + f" of {self.type_of(target['items'])}"
        return text

    def add(self, section: Section, key: str, node: dict[str, Any], link: str = "") -> None:
        """One row: the key, its type (or the section of the block it is), its default and description."""
        description = " ".join(str(node.get("description", self.resolve(node).get("description", ""))).split())
        default = f"`{json.dumps(node['default'])}`" if "default" in node else ""
        kind = f"see [{link}](#{link.lower()})" if link else self.type_of(node)
        section.rows.append((f"`{key}`", kind, default, description))

    def walk(self, section: Section, key: str, node: dict[str, Any]) -> None:
        """Rows for `node` at `key` and, for a block, its keys below it; a shared $def block gets its own section."""
        name = self.block_def(node)
        if node.get("$ref", "").startswith("#/properties/"):  # a top-level key's block: its own section
            self.add(section, key, node, link=node["$ref"].rsplit("/", 1)[-1])
            return
        if name is not None:
            self.add(section, key, node, link=name)
            where = f"`{key}`"
            if section.title in self.defs:  # a key inside another shared block: name the block
                where += f" of [{section.title}](#{section.title})"
            self.shared(name).used_at.append(where)
            return
        target = self.resolve(node)
        self.add(section, key, node)
        for child, sub in target.get("properties", {}).items():
            self.walk(section, f"{key}.{child}", sub)
        entries = target.get("additionalProperties")
        if isinstance(entries, dict) and (_is_block(self.resolve(entries)) or self.block_def(entries)):
            names = _ref_name(target.get("propertyNames", {})) or key.rsplit(".", 1)[-1]
            self.walk(section, f"{key}.{NAME_PLACEHOLDERS.get(names, '<name>')}", entries)
        items = target.get("items")
        if isinstance(items, dict) and (_is_block(self.resolve(items)) or self.block_def(items)):
            self.walk(section, f"{key}[]", items)

    def shared(self, name: str) -> Section:
        """The section of a shared $def block, filled on first use."""
        if name not in self.sections:
            block = self.defs[name]
            notes = [block.get("description", "")] + [
                self.resolve(n).get("description", "") for n in block.get("allOf", [])
            ]
            section = self.sections[name] = Section(name, " ".join(" ".join(notes).split()))
            for child, sub in block["properties"].items():
                self.walk(section, child, sub)
        return self.sections[name]

    def build(self) -> str:
        """The whole page: the top level's values, then a section per top-level block and shared block."""
        check_keywords(self.schema)
        top = Section("Top level")
        self.sections = {"Top level": top}
        order = ["Top level"]
        for key, node in self.schema["properties"].items():
            name = self.block_def(node)
            if name is None and node.get("type") in ("object", "array"):
                self.sections[key] = Section(key)
                self.walk(self.sections[key], key, node)
                order.append(key)
            else:
                self.walk(top, key, node)
                order += [name] if name else []
        order += [name for name in self.sections if name not in order]
        return INTRO + "".join(_render(self.sections[name]) for name in order)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _render(section: Section) -> str:
    """A section as Markdown: its heading, where it is used, its table."""
    about = f"{section.description}\n\n" if section.description else ""
    used = f"Used at {', '.join(section.used_at)}.\n\n" if section.used_at else ""
    head = "| key | type | default | description |\n| --- | --- | --- | --- |\n"
    rows = "".join("| " + " | ".join(_cell(c) for c in row) + " |\n" for row in section.rows)
    return f"\n## {section.title}\n\n{about}{used}{head}{rows}"


def render_page(schema_path: Path = SCHEMA) -> str:
    """The configuration page of a schema file."""
    return re.sub(r"\n{3,}", "\n\n", SchemaPage(yaml.safe_load(schema_path.read_text())).build())


def main(argv: list[str] | None = None) -> int:
    """Write docs/configuration.md, or with --check say whether it is current (exit 1 when not)."""
    parser = argparse.ArgumentParser(prog="python -m trainer.sweep.config_docs", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the page differs from the schema's")
    parser.add_argument("--out", type=Path, default=PAGE)
    args = parser.parse_args(argv)
    page = render_page()
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != page:
            print(f"{args.out} is out of date: python -m trainer.sweep.config_docs", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(page)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
