"""The allowed directions between packages, and no cycle among modules, counting imports inside functions.

A cycle or a back-arrow hidden behind a function-level import still ties the modules together (neither
can be read, tested or moved alone); tasks are looked up by name in `trainer.tasks.registry` instead.

Layers, low to high: the run contract (`trainer.contract`) <- the typed settings (`trainer.settings`,
`trainer.setting_fields`) <- the early-warning detectors (`trainer.early_warning`, which the trainer
watches and the analysis replays), models, tasks, workflows <- the training loop (`trainer.rl`) <- the
launcher and planner (`trainer.sweep`) <- the CLI (`trainer.__main__`); `analysis` reads the contract,
the settings and the detectors, never the trainer's loop or launcher. ALLOWED names, for each package, the packages
it may import; a package always imports itself. An import under `if TYPE_CHECKING:` is exempt (it
never runs). A package absent from the tree (an older checkout) is simply not there to import.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("trainer", "analysis")
CYCLE_SOURCES = ("trainer", "analysis", "benchmarks")  # no module cycle in these
# (dotted prefix, package): a module belongs to the package of the longest prefix it starts with
PACKAGES = (
    ("trainer.contract", "contract"),
    ("trainer.settings", "settings"),
    ("trainer.setting_fields", "settings"),
    ("trainer.early_warning", "detectors"),
    ("trainer.models", "models"),
    ("trainer.tasks", "tasks"),
    ("trainer.workflows", "workflows"),
    ("trainer.rl", "rl"),
    ("trainer.sweep", "sweep"),
    ("trainer.__main__", "cli"),
    ("trainer", "trainer"),  # trainer/__init__.py: the namespace, imports nothing
    ("analysis", "analysis"),
)
ALLOWED = {
    "contract": set(),
    "settings": {"contract"},
    "detectors": {"contract", "settings"},
    "tasks": {"contract", "settings"},
    "workflows": {"contract", "settings", "tasks"},
    "models": {"contract", "settings", "tasks", "workflows"},
    "rl": {"contract", "settings", "detectors", "tasks", "workflows", "models"},
    "sweep": {"contract", "settings", "detectors", "tasks", "workflows", "models", "rl"},
    "cli": {"contract", "settings", "detectors", "tasks", "workflows", "models", "rl", "sweep", "analysis"},
    "trainer": set(),
    "analysis": {"contract", "settings", "detectors"},
}
# Back-arrows not yet resolved (none today), each (importing file, imported module) with why it is open. The test fails
# when one disappears too, so that its entry goes with it.
KNOWN_BACK_ARROWS: dict[tuple[str, str], str] = {}


def module_name(path: Path, root: Path = ROOT) -> str:
    """Dotted module name of a file under `root` (a package's __init__ is the package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str) -> str | None:
    """The layer package of a dotted module name, or None for a module outside the checked packages."""
    for prefix, package in PACKAGES:
        if module == prefix or module.startswith(prefix + "."):
            return package
    return None


def type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes inside `if TYPE_CHECKING:` blocks (imports there never run)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        test = node.test if isinstance(node, ast.If) else None
        name = getattr(test, "id", None) or getattr(test, "attr", None)
        if name == "TYPE_CHECKING":
            inside |= {id(child) for stmt in node.body for child in ast.walk(stmt)}
    return inside


def imported_modules(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, dotted module) of every import in `path`, in functions too; `from a import b` counts as a.b."""
    tree = ast.parse(path.read_text())
    skip = type_checking_nodes(tree)
    here = module_name(path, root)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: up `level - 1` packages from this module's package
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base]).strip(".")
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def back_arrows(root: Path = ROOT) -> list[tuple[str, int, str, str, str]]:
    """(file, line, package, imported package, module) of every import against ALLOWED, over SOURCES."""
    found = []
    for path in sorted(p for source in SOURCES for p in (root / source).rglob("*.py")):
        source = package_of(module_name(path, root))
        if source is None:
            continue
        for line, module in imported_modules(path, root):
            target = package_of(module)
            if target is not None and target != source and target not in ALLOWED[source]:
                found.append((path.relative_to(root).as_posix(), line, source, target, module))
    return found


def is_known(arrow: tuple[str, int, str, str, str], known: dict[tuple[str, str], str]) -> bool:
    """Whether a back-arrow is one of `known` (its file, and its module or the module's package)."""
    file, _, _, _, module = arrow
    return any(file == f and (module == m or module.startswith(m + ".")) for f, m in known)


def describe(arrows: list[tuple[str, int, str, str, str]]) -> list[str]:
    """`file:line: package -> package (module)`, one line per back-arrow."""
    return [f"{file}:{line}: {source} -> {target} ({module})" for file, line, source, target, module in arrows]


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """{module: project modules it imports} over CYCLE_SOURCES (`from pkg import mod` counts pkg and pkg.mod)."""
    files = [p for source in CYCLE_SOURCES for p in (root / source).rglob("*.py")]
    known = {module_name(p, root) for p in files}
    graph = {}
    for path in files:
        names = {n for _, name in imported_modules(path, root) for n in (name, name.rpartition(".")[0])}
        graph[module_name(path, root)] = (names & known) - {module_name(path, root)}
    return graph


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


def test_every_package_has_its_allowed_directions() -> None:
    named = {package for _, package in PACKAGES}
    assert set(ALLOWED) == named
    assert all(targets <= named for targets in ALLOWED.values())


def test_the_layers_have_no_cycle() -> None:
    """ALLOWED itself is a partial order: no two packages may import each other, directly or around."""

    def reachable(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in ALLOWED[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    assert [p for p in ALLOWED if p in reachable(p)] == []


def test_a_back_arrow_is_found_in_a_function_and_named(tmp_path: Path) -> None:
    """A function-level import against the direction fails with its file and line; one under
    TYPE_CHECKING does not; a downward import passes."""
    (tmp_path / "trainer" / "contract").mkdir(parents=True)
    (tmp_path / "analysis").mkdir()
    (tmp_path / "trainer" / "contract" / "runid.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from trainer.rl import train\n"
        "def f():\n"
        "    from trainer.sweep import launch\n"
    )
    (tmp_path / "analysis" / "runs.py").write_text("import trainer.contract.rundir\nfrom trainer.rl.run import x\n")
    assert describe(back_arrows(tmp_path)) == [
        "analysis/runs.py:2: analysis -> rl (trainer.rl.run.x)",
        "trainer/contract/runid.py:5: contract -> sweep (trainer.sweep.launch)",
    ]


def test_every_import_goes_down_the_layers() -> None:
    problems = describe([a for a in back_arrows() if not is_known(a, KNOWN_BACK_ARROWS)])
    assert problems == [], f"{len(problems)} imports against the package layers:\n" + "\n".join(problems)


def test_every_known_back_arrow_is_still_there() -> None:
    """An entry of KNOWN_BACK_ARROWS whose import is gone goes with it."""
    arrows = back_arrows()
    assert [k for k in KNOWN_BACK_ARROWS if not any(is_known(a, {k: ""}) for a in arrows)] == []
