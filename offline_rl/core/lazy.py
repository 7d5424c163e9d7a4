"""Package attributes imported on first use (PEP 562), so that `import offline_rl` and the command
lines' `--help` do not pay for torch and Tianshou before they are needed."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, sources: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package`: name -> attribute of the module `sources[name]`."""

    def getattr_(name: str) -> Any:
        if name not in sources:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            module = importlib.import_module(sources[name])
        except AttributeError as error:
            # Raised by the import (a dependency using an API its installed version lacks), it would leave
            # `__getattr__` as "no attribute" and read as `cannot import name ...`, hiding its cause.
            raise ImportError(f"{package}.{name}: importing {sources[name]} failed: {error}") from error
        return getattr(module, name)

    def dir_() -> list[str]:
        return sorted(sources)

    return getattr_, dir_
