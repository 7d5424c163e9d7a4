"""Plumbing shared by the command-line entry points in `examples/` and `converters/`.

Flags are spelled in kebab-case, as Tianshou's classic examples are, and every flag also accepts its
snake_case spelling so that commands copied from Tianshou or CORL keep working.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from offline_rl.errors import OfflineRLError

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130


class FlagParser(argparse.ArgumentParser):
    """An ArgumentParser whose long flags also answer to their snake_case spelling."""

    def add_argument(self, *name_or_flags: str, **kwargs: Any) -> argparse.Action:  # type: ignore[override]
        names = list(name_or_flags)
        for flag in name_or_flags:
            if flag.startswith("--") and "-" in flag[2:]:
                snake = "--" + flag[2:].replace("-", "_")
                if snake not in names:
                    names.append(snake)
        return super().add_argument(*names, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        """Print usage and a one-line error, exit 2 (argparse's own convention)."""
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(EXIT_USER_ERROR)


def run_main(main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None) -> None:
    """Run a CLI `main`, turning user errors into one line on stderr and exit status 2.

    Bugs still raise with a traceback: hiding those would make them impossible to report.
    """
    try:
        code = main(argv)
    except OfflineRLError as error:
        sys.stderr.write(f"error: {error}\n")
        sys.exit(EXIT_USER_ERROR)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted: nothing partial was written\n")
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(code or 0)
