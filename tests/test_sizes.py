"""Module and function sizes: no module over 400 lines, no function over 60 (tests included).

A function's size is ``end_lineno - lineno + 1`` of its ``def`` (decorators not counted);
a nested function counts in its own right and inside its parent's size.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("trainer", "analysis", "benchmarks", "tests")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def python_files() -> list[Path]:
    """Every .py file under the measured packages, sorted for a stable report."""
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def module_lines(path: Path) -> int:
    """Lines in a module, as `wc -l` counts them (plus a last line without newline)."""
    return len(path.read_text().splitlines())


def function_sizes(source: str) -> list[tuple[str, int, int]]:
    """(qualified name, first line, size) of every function and method in `source`."""
    found: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                found.append((name, child.lineno, child.end_lineno - child.lineno + 1))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def oversized(files: list[Path], root: Path = ROOT) -> list[str]:
    """One line per module over MAX_MODULE_LINES or function over MAX_FUNCTION_LINES."""
    offenders = []
    for path in files:
        rel = path.relative_to(root)
        lines = module_lines(path)
        if lines > MAX_MODULE_LINES:
            offenders.append(f"{rel}: module has {lines} lines (max {MAX_MODULE_LINES})")
        for name, lineno, size in function_sizes(path.read_text()):
            if size > MAX_FUNCTION_LINES:
                offenders.append(f"{rel}:{lineno}: {name} has {size} lines (max {MAX_FUNCTION_LINES})")
    return offenders


def test_no_module_or_function_over_the_limits() -> None:
    offenders = oversized(python_files())
    assert not offenders, "split these:\n" + "\n".join(offenders)


def test_nested_functions_count_alone_and_in_their_parent() -> None:
    body = "".join(f"            x{i} = {i}\n" for i in range(3))
    source = f"class C:\n    def outer(self):\n        def inner():\n{body}        return inner\n"
    sizes = {name: size for name, _, size in function_sizes(source)}
    assert sizes == {"C.outer": 6, "C.outer.inner": 4}


@pytest.mark.parametrize(("body_lines", "flagged"), [(MAX_FUNCTION_LINES - 1, False), (MAX_FUNCTION_LINES, True)])
def test_a_function_one_line_over_is_named(tmp_path: Path, body_lines: int, flagged: bool) -> None:
    # def line + body_lines: body_lines == MAX is one over the limit.
    path = tmp_path / "probe.py"
    path.write_text("def long():\n" + "    x = 1\n" * body_lines)
    report = oversized([path], root=tmp_path)
    assert report == (["probe.py:1: long has 61 lines (max 60)"] if flagged else [])


def test_a_module_over_the_limit_is_named(tmp_path: Path) -> None:
    path = tmp_path / "probe.py"
    path.write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert oversized([path], root=tmp_path) == ["probe.py: module has 401 lines (max 400)"]
