"""The machinery of typed settings: a field with its default, help text and constraints, and a dataclass
built from a dict with unknown keys and values outside a field's choices as errors naming their key path.

The sections themselves are the other modules of trainer/settings/; schema.py turns a field's type,
default, help and constraints into its JSON schema (rules/config.schema.yaml).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Sequence
from dataclasses import field
from typing import Any, TypeVar

T = TypeVar("T")


class SettingsError(ValueError):
    """A setting that cannot be used; the message names its key path and how to fix it."""


def default_of(cls: type, name: str) -> Any:
    """The default of field `name` of settings class `cls` (for code that fills a dict before it is typed)."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def setting(
    default: Any,
    help: str,  # noqa: A002 (the HfArgumentParser / TRL name)
    *,
    choices: Sequence[Any] | None = None,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    schema: dict[str, Any] | None = None,
) -> Any:
    """A dataclass field with its default, its `help` text (as TRL's config fields carry) and its constraints.

    `choices`: the values allowed (from_dict refuses others); `ge`, `gt`, `le`, `lt`: bounds (>=, >, <=, <);
    `schema`: a JSON-schema fragment for what the annotation cannot say (a pattern, a list's length, a
    `$ref`), merged over the schema derived from the annotation. The config schema checks all of them.
    """
    bounds = {"minimum": ge, "exclusiveMinimum": gt, "maximum": le, "exclusiveMaximum": lt}
    metadata = {
        "help": help,
        "choices": tuple(choices) if choices is not None else None,
        "bounds": {k: v for k, v in bounds.items() if v is not None},
        "schema": schema or {},
    }
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@functools.cache
def _fields_of(cls: type) -> tuple[dict[str, Any], dict[str, dataclasses.Field]]:
    """A settings class's type hints and fields by name (read once per class: from_dict runs per run)."""
    return typing.get_type_hints(cls), {f.name: f for f in dataclasses.fields(cls)}


@functools.cache
def _is_plain(tp: Any) -> bool:
    """Whether values of `tp` are taken as they are (no nested settings class inside)."""
    return not dataclasses.is_dataclass(tp) and all(_is_plain(a) for a in typing.get_args(tp))


def _convert(tp: Any, value: Any, path: str) -> Any:
    """`value` as type `tp`: nested dataclasses (and lists / optionals of them) built from dicts."""
    if _is_plain(tp):
        return value
    if dataclasses.is_dataclass(tp) and isinstance(value, dict):
        return from_dict(tp, value, path)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType) and value is not None:
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, path) if len(inner) == 1 else value
    if origin is list and args and isinstance(value, list):
        return [_convert(args[0], v, f"{path}.{i}") for i, v in enumerate(value)]
    return value


def _check_choice(f: dataclasses.Field, value: Any, path: str) -> None:
    """Raise naming `path` where `value` is not one of the field's choices (None passes where it is the default)."""
    choices = f.metadata.get("choices")
    if choices is None or value in choices or (value is None and f.default is None):
        return
    raise SettingsError(f"{path}: {value!r} is not one of {', '.join(map(str, choices))}")


def from_dict(cls: type[T], data: dict[str, Any], path: str) -> T:
    """Build dataclass `cls` from `data`, defaults for absent keys; an unknown key or a value outside a
    field's choices is an error naming its key path under `path`."""
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: expected a mapping, got {data!r}")
    hints, fields = _fields_of(cls)
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise SettingsError(f"{path}.{unknown[0]}: unknown key (allowed here: {', '.join(sorted(fields))})")
    for k, v in data.items():
        _check_choice(fields[k], v, f"{path}.{k}")
    return cls(**{k: _convert(hints[k], v, f"{path}.{k}") for k, v in data.items()})
