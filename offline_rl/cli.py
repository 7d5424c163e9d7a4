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


def str_to_bool(value: str) -> bool:
    """Parse yes/no style values for flags given as `--flag false` (CORL's spelling)."""
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "y", "on"):
        return True
    if lowered in ("0", "false", "no", "n", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got '{value}'")


def add_bool_flag(parser: FlagParser, name: str, default: bool, help_text: str) -> None:
    """`--name` / `--no-name` pair (also `--name false`), with snake_case spellings."""
    dest = name.lstrip("-").replace("-", "_")
    parser.add_argument(
        name,
        dest=dest,
        nargs="?",
        const=True,
        default=default,
        type=str_to_bool,
        help=f"{help_text} (default: {default})",
    )
    parser.add_argument("--no-" + name.lstrip("-"), dest=dest, action="store_false", help=argparse.SUPPRESS)


def pick_device(flag: str) -> str:
    """`auto` means CUDA when a GPU is visible, else CPU; an explicit `cuda` without one is an error."""
    import torch

    if flag == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if flag.startswith("cuda") and not torch.cuda.is_available():
        raise OfflineRLError(f"--device {flag}: no CUDA device is available here (use --device cpu or auto)")
    if not (flag == "cpu" or flag.startswith("cuda")):
        raise OfflineRLError(f"--device {flag}: expected auto, cpu, cuda or cuda:N")
    return flag
