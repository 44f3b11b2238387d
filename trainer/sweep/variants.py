"""Variants: named deltas of the config, an optional sixth axis of a matrix (`matrices.<m>.variants`).

A variant `{name: delta}` adds, next to the matrix's plain runs, one run per multi-agent run with the
suffix `-{name}` (trainer.contract.runid) whose settings are the plain run's with `delta` deep-merged in
after the overrides. A delta that touches only `workflows.<w>` (a workflow knob such as n_votes) applies
to runs of those workflows only: it would not change the others. Any other delta applies to the workflows
its `applies_to` names (all multi-agent workflows of the matrix without it): named in the config, so that
the matrix says which runs exist, and a variant that a workflow's code ignores (per-role rewards where the
workflow has none) is left out where it would be that workflow's plain run again, which the config check
refuses (trainer/sweep/duplicates.py). The single-agent baseline is the reference of every cell and gets no
variants.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from trainer.contract.runid import RunId

SECTIONS = ("training", "resources", "workflows", "tasks")  # what a delta may set (the schema says the same)
APPLIES_TO = "applies_to"  # a variant's key beside its sections: the workflows whose runs get it


def matrix_variants(config: dict[str, Any], matrix: str) -> dict[str, dict[str, Any]]:
    """The variants of a matrix by name ({} where it has none)."""
    return config["matrices"][matrix].get("variants") or {}


def variant_workflows(delta: dict[str, Any]) -> set[str] | None:
    """The workflows a variant is limited to: its `applies_to`, else those of a delta that touches nothing but
    their `workflows` entries; None where it applies to every multi-agent workflow."""
    if APPLIES_TO in delta:
        return set(delta[APPLIES_TO])
    if set(delta) == {"workflows"} and delta["workflows"]:
        return set(delta["workflows"])
    return None


def variant_runs(config: dict[str, Any], matrix: str, plain: list[RunId]) -> list[RunId]:
    """The variant runs of a matrix: per variant, in config order, its copy of each multi-agent plain run
    (of the workflows it is limited to, where it is)."""
    multi_agent = set(config["matrices"][matrix]["workflows"])
    runs = []
    for name, delta in matrix_variants(config, matrix).items():
        limited = variant_workflows(delta)
        runs += [
            dataclasses.replace(r, variant=name)
            for r in plain
            if r.variant is None and r.workflow in multi_agent and (limited is None or r.workflow in limited)
        ]
    return runs


def variant_delta(config: dict[str, Any], variant: str) -> dict[str, Any]:
    """A variant's delta: the matrix in use's, else the one other matrix that defines the name.

    Raises ValueError naming the variant where no matrix defines it or several define it differently.
    """
    in_use = matrix_variants(config, config["matrix"])
    if variant in in_use:
        return in_use[variant]
    found = {
        name: m["variants"][variant] for name, m in config["matrices"].items() if variant in (m.get("variants") or {})
    }
    deltas = list({repr(d): d for d in found.values()}.values())
    if len(deltas) != 1:
        where = f"matrices {sorted(found)} define it differently" if found else "no matrix defines it"
        raise ValueError(f"variant {variant!r}: {where} (matrices.<matrix>.variants.{variant})")
    return deltas[0]


def deep_merge(base: dict[str, Any], delta: dict[str, Any]) -> dict[str, Any]:
    """`base` with `delta` merged in: nested mappings key by key, anything else replaced (copies, no aliasing)."""
    out = copy.deepcopy(base)
    for key, value in delta.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def variant_problems(config: dict[str, Any]) -> list[str]:
    """What the schema cannot check of each matrix's variants: the workflows and tasks a delta names exist, the
    workflows `applies_to` names are the matrix's, and a variant limited to some workflows has runs in its matrix."""
    problems = []
    for matrix, m in config["matrices"].items():
        for name, delta in (m.get("variants") or {}).items():
            where = f"matrices.{matrix}.variants.{name}"
            for section in ("workflows", "tasks"):
                for key in delta.get(section, {}):
                    if key not in config[section]:
                        problems.append(f"{where}.{section}.{key}: {key!r} has no entry in `{section}`")
            stray = [w for w in delta.get(APPLIES_TO, []) if w not in m["workflows"]]
            if stray:
                problems.append(
                    f"{where}.{APPLIES_TO}: {stray} not among matrix {matrix!r}'s workflows ({m['workflows']})"
                )
            limited = variant_workflows(delta)
            if limited is not None and not limited & set(m["workflows"]):
                problems.append(
                    f"{where}: changes only workflows {sorted(limited)}, none of which matrix "
                    f"{matrix!r} runs ({m['workflows']}): a variant of 0 runs"
                )
    return problems
