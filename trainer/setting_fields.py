"""The machinery of typed settings: a field with its default and help text, and a dataclass built from a
dict with unknown keys as errors naming their key path (trainer/settings.py holds the settings themselves)."""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import field
from typing import Any, TypeVar

T = TypeVar("T")


class SettingsError(ValueError):
    """A setting that cannot be used; the message names its key path and how to fix it."""


def default_of(cls: type, name: str) -> Any:
    """The default of field `name` of settings class `cls` (for code that fills a dict before it is typed)."""
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


def setting(default: Any, help: str) -> Any:  # noqa: A002 (the HfArgumentParser / TRL name)
    """A dataclass field with its default and a `help` text (as TRL's config fields carry)."""
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


def _convert(tp: Any, value: Any, path: str) -> Any:
    """`value` as type `tp`: nested dataclasses (and lists / optionals of them) built from dicts."""
    if dataclasses.is_dataclass(tp) and isinstance(value, dict):
        return from_dict(tp, value, path)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType) and value is not None:
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, path) if len(inner) == 1 else value
    if origin is list and args and isinstance(value, list):
        return [_convert(args[0], v, f"{path}.{i}") for i, v in enumerate(value)]
    return value


def from_dict(cls: type[T], data: dict[str, Any], path: str) -> T:
    """Build dataclass `cls` from `data`, defaults for absent keys; an unknown key is an error at `path`."""
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise SettingsError(f"{path}.{unknown[0]}: unknown key (allowed here: {', '.join(sorted(names))})")
    return cls(**{k: _convert(hints[k], v, f"{path}.{k}") for k, v in data.items()})
