"""No import cycle among the project's modules, counting imports inside functions too.

A cycle hidden behind a function-level import still ties the modules together (neither can be
read, tested or moved alone); tasks are looked up by name in `trainer.tasks.registry` instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("trainer", "analysis", "benchmarks")


def module_name(path: Path) -> str:
    """Dotted module name of a file under ROOT (a package's __init__ is the package)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The project modules `path` imports anywhere in its body (`from pkg import mod` included)."""
    found = set()
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base]).strip(".")
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        found |= {n for n in names if n in known}
    return found - {module_name(path)}


def import_graph() -> dict[str, set[str]]:
    """{module: project modules it imports} over PACKAGES."""
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    known = {module_name(p) for p in files}
    return {module_name(p): imports_of(p, known) for p in files}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (depth-first search)."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_finds_one_and_only_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_tasks_base_does_not_import_the_tasks() -> None:
    graph = import_graph()
    assert not graph["trainer.tasks.base"] & {"trainer.tasks.math_task", "trainer.tasks.code_task"}


def test_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
