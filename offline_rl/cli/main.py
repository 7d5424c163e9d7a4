"""How the command-line entry points in `examples/` and `converters/` start and end: the library's
messages (its `logging` tree, `offline_rl`) printed as plain lines; user errors, and a disk that is
full, read-only or forbidden, as one line on stderr and exit status 2, Ctrl-C exit status 130, bugs a
traceback."""

from __future__ import annotations

import errno
import logging
import os
import re
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from offline_rl.core.errors import EXIT_USER_ERROR, OfflineRLError, OfflineRLWarning
from offline_rl.core.files import FULL_DISK_ERRNOS
from offline_rl.core.interrupts import Terminated, exit_status, sigterm_stops_like_ctrl_c

MACHINE_ERRNOS = FULL_DISK_ERRNOS | {errno.EROFS, errno.EACCES}
"""OS errors that say what the machine refused (no space, a read-only mount, no permission), never a
bug in the program: retrying cannot help, and a traceback would hide the one line that matters."""


# Known third-party notices that say nothing about the user's run. gymnasium asks to upgrade the
# MuJoCo -v4 tasks to -v5; the examples keep -v4, the versions whose models D4RL's v2 data matches
# (and for the mujoco-py -v2/-v3 ones, which fail to build here, a one-line error names -v4 instead).
KNOWN_HARMLESS_WARNINGS = (r".*The environment \S+-v[234] is out of date",)


def _one_line_warnings() -> None:
    """Our own warnings (`OfflineRLWarning`) print as `warning: <message>`; others keep Python's
    format, minus the known harmless ones."""
    plain_format = warnings.formatwarning
    harmless = [re.compile(pattern) for pattern in KNOWN_HARMLESS_WARNINGS]

    # In the formatter rather than as a filter: torch and Tianshou add filters of their own when
    # imported, ahead of any added here.
    def formatwarning(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> str:
        if any(pattern.match(str(message)) for pattern in harmless):
            return ""
        if issubclass(category, OfflineRLWarning):
            return f"warning: {message}\n"
        return plain_format(message, category, *args, **kwargs)

    warnings.formatwarning = formatwarning  # type: ignore[assignment]


class _ProgramOutput(logging.Handler):
    """A message per line on the program's standard output, as it is when the message comes (a caller
    may have redirected it since the handler was added), above any progress bar on the screen."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm  # tqdm: kept out of --help's start

        try:
            tqdm.write(self.format(record), file=sys.stdout)
            sys.stdout.flush()
        except Exception:  # a closed or broken stdout: logging's own report, never a crash
            self.handleError(record)


def print_library_messages() -> None:
    """The library's messages (INFO and above of the `offline_rl` logger tree) as plain lines on
    standard output, the way a program shows what it does; idempotent."""
    logger = logging.getLogger("offline_rl")
    if not any(isinstance(handler, _ProgramOutput) for handler in logger.handlers):
        logger.addHandler(_ProgramOutput())
    logger.setLevel(logging.INFO)
    logger.propagate = False  # a host program's root handlers would print each line twice


def run_main(main: Callable[[Sequence[str] | None], Any], argv: Sequence[str] | None = None) -> None:
    """Run a CLI `main`; a bug still raises with a traceback, since hiding it would make it unreportable."""
    print_library_messages()
    _one_line_warnings()
    with sigterm_stops_like_ctrl_c():  # a scheduler's SIGTERM stops the command as Ctrl-C does
        code = _exit_status(main, argv)
    sys.exit(code)


def _exit_status(main: Callable[[Sequence[str] | None], Any], argv: Sequence[str] | None) -> int:
    """Run `main`: its own status, or 2 after one line for a user's error, 130 (143) after Ctrl-C (SIGTERM)."""
    try:
        result = main(argv)
    except OfflineRLError as error:
        sys.stderr.write(f"error: {error}\n")
        return EXIT_USER_ERROR
    except KeyboardInterrupt as interrupt:
        stopped = "terminated (SIGTERM)" if isinstance(interrupt, Terminated) else "interrupted"
        sys.stderr.write(f"{stopped}: no output was left half-written\n")
        return exit_status(interrupt)
    except OSError as error:
        if error.errno not in MACHINE_ERRNOS:
            raise
        where = f"{error.filename}: " if error.filename else ""
        sys.stderr.write(f"error: {where}{os.strerror(error.errno)}\n")
        return EXIT_USER_ERROR
    return result if isinstance(result, int) else 0
