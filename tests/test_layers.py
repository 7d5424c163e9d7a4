"""The library stands on its own: its modules never reach up into the application layer.

`offline_rl/apps/` is the application around the algorithms (flags, programs, trainers' plumbing);
everything else under `offline_rl/` is what a script built on the library imports. The only other
modules allowed to import `offline_rl.apps` are the commands themselves (`python -m offline_rl.collect`,
`offline_rl.describe`, `offline_rl.sweep`, `offline_rl.results`), which run programs.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "offline_rl"
COMMANDS = {"apps", "sweep", "results", "collect.py", "describe.py"}


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, by absolute name, at any depth of the file (lazy imports count)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def library_files() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*.py") if path.relative_to(PACKAGE).parts[0] not in COMMANDS)


def test_library_modules_do_not_import_the_application_layer() -> None:
    files = library_files()
    assert PACKAGE / "cpu_products.py" in files and PACKAGE / "cql_sac" / "algorithm.py" in files
    reaching_up = {
        str(path.relative_to(REPO_ROOT)): sorted(
            name for name in imported_modules(path) if name == "offline_rl.apps" or name.startswith("offline_rl.apps.")
        )
        for path in files
    }
    assert {path: names for path, names in reaching_up.items() if names} == {}


def test_the_check_sees_an_import_of_the_application_layer(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text("def f():\n    from offline_rl.apps.run_config import CPU_PRODUCTS\n    return CPU_PRODUCTS\n")
    assert "offline_rl.apps.run_config" in imported_modules(module)
    module.write_text("from offline_rl import apps\n")
    assert "offline_rl.apps" in imported_modules(module)


def test_no_module_is_named_after_a_standard_library_module() -> None:
    """A file named like a standard module replaces it for any Python started in its folder: with an
    `offline_rl/inspect.py`, `python -c "import dataclasses"` run from `offline_rl/` stopped with an
    ImportError, since dataclasses imports inspect. Commands and modules take other names."""
    names = {path.stem for path in PACKAGE.rglob("*.py")} | {
        path.name for path in PACKAGE.rglob("*") if path.is_dir() and path.name != "__pycache__"
    }
    assert names & set(sys.stdlib_module_names) == set()
