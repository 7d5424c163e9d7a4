"""The house's shape, counted from the imports: ten rooms besides the package's face, layered one way,
no import circle, no module too long to read.

The layers, bottom up: `core` (settings, errors, the machine) → `envs` → `data` → `algorithms` → `runs`
(a training run and what surrounds it) → `cli` (flags and every program's main) → `results` → the
commands `sweep`, `collect`, `describe`. A module may import its own layer and the layers below it,
never one above; imports inside functions count as much as those at the top of a file.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "offline_rl"
LAYERS = ("core", "envs", "data", "algorithms", "runs", "cli", "results", ("sweep", "collect", "describe"))
MAX_ROOMS = 10
MAX_LINES = 400


def layer_of(module: str) -> int:
    """A module's layer: the index of its top-level entry in `LAYERS`; the package's face is the top."""
    parts = module.split(".")
    if len(parts) == 1:
        return len(LAYERS)
    for index, layer in enumerate(LAYERS):
        if parts[1] in (layer if isinstance(layer, tuple) else (layer,)):
            return index
    raise AssertionError(f"{module}: in no layer of {LAYERS}")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def own_imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules a file imports, at any depth of the file (imports inside functions count),
    `TYPE_CHECKING` blocks aside; `from package import submodule` names the submodule."""
    found = set()
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    checking = [
        node for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
    ]
    skipped = {id(inner) for node in checking for inner in ast.walk(node)}
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    files = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    modules = set(files)
    return {module: own_imports(path, modules) - {module} for module, path in files.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of `graph` (strongly connected parts of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            part = []
            while True:
                other = stack.pop()
                part.append(other)
                if other == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_a_layer_above_its_own() -> None:
    graph = import_graph()
    upward = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets if layer_of(b) > layer_of(a))
    assert upward == []


def test_no_import_circle() -> None:
    assert circles(import_graph()) == []


def test_the_checks_see_a_circle_and_an_import_up_a_layer() -> None:
    graph = {"offline_rl.core.a": {"offline_rl.core.b"}, "offline_rl.core.b": {"offline_rl.core.a"}, "x": set()}
    assert circles(graph) == [["offline_rl.core.a", "offline_rl.core.b"]]
    assert layer_of("offline_rl.runs.training") > layer_of("offline_rl.data.d4rl") > layer_of("offline_rl.core")


def test_the_package_has_ten_rooms_and_no_module_too_long_to_read() -> None:
    rooms = sorted(path.name for path in PACKAGE.iterdir() if path.name not in ("__init__.py", "__pycache__"))
    assert len(rooms) <= MAX_ROOMS, rooms
    long = {
        str(path.relative_to(REPO_ROOT)): n
        for path in PACKAGE.rglob("*.py")
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_no_module_is_named_after_a_standard_library_module() -> None:
    """A file named like a standard module replaces it for any Python started in its folder: with an
    `offline_rl/inspect.py`, `python -c "import dataclasses"` run from `offline_rl/` stopped with an
    ImportError, since dataclasses imports inspect. Commands and modules take other names."""
    names = {path.stem for path in PACKAGE.rglob("*.py")} | {
        path.name for path in PACKAGE.rglob("*") if path.is_dir() and path.name != "__pycache__"
    }
    assert names & set(sys.stdlib_module_names) == set()
