"""Progress bars that suit where the output goes.

On a terminal, a tqdm bar redraws in place. In a log file (CI, `nohup`, a cluster job) the same
redraws become hundreds of lines of carriage returns, so there the bar is written as one plain line
at most every `LOG_INTERVAL_S` seconds, plus the final one (also for bars a terminal would erase).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from tqdm import tqdm

LOG_INTERVAL_S = 30.0


@dataclass(frozen=True)
class Meter:
    """What a piece of work tells a bar it does not own (one drawn by another process, or shared by
    several jobs): work found (`grow`: the bar's total goes up, for work whose size is learnt only once
    it has started) and work done (`advance`)."""

    grow: Callable[[int], None]
    advance: Callable[[int], None]


def bar_meter(bar: tqdm) -> Meter:
    """A meter that counts on `bar`."""

    def grow(count: int) -> None:
        bar.total = (bar.total or 0) + count  # shown with the next update (a log gets no extra line)

    return Meter(grow=grow, advance=bar.update)


class _Lines:
    """A file for tqdm that turns each redraw into one newline-terminated line."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        line = text.replace("\r", "").strip()
        if line:
            self.stream.write(line + "\n")

    def flush(self) -> None:
        self.stream.flush()


class _LogBar(tqdm):
    """A bar written to a log: its final line once. tqdm prints the final state when the bar closes,
    even when an update has just printed the same count and postfix (a sweep's log ended with its
    `6/6` line twice)."""

    _shown: tuple[Any, ...] | None = None

    def moveto(self, n: int) -> None:
        """Nothing: a bar below another (a download bar under a conversion's) moves the cursor there on a
        terminal; in a log that is a stray escape code, and each line is simply the next."""

    def display(self, msg: str | None = None, pos: int | None = None) -> Any:
        shown = super().display(msg, pos)
        if msg is None:
            self._shown = (self.n, self.postfix)
        return shown

    def close(self) -> None:
        if not self.disable and self._shown == (self.n, self.postfix):  # a disabled bar has no postfix
            self.leave = False  # what the log's last line says is already the final state
        super().close()


def progress_bar(iterable: Any = None, **kwargs: Any) -> tqdm:
    """`tqdm(iterable, **kwargs)` on a terminal; plain periodic lines when stderr is not one."""
    if sys.stderr.isatty():
        return tqdm(iterable, **kwargs)
    # miniters 1: tqdm's default (adaptive) lets its monitor thread redraw a bar that has not printed
    # for 10 s, which in a log is one more line between the periodic ones
    plain = {
        "file": _Lines(sys.stderr),
        "mininterval": LOG_INTERVAL_S,
        "miniters": 1,
        "ascii": True,
        "dynamic_ncols": False,
    }
    # A log cannot erase a line: a bar that clears itself on a terminal (leave=False) would leave its
    # first line, "0/138", as if the work had stalled there. It ends with its final line instead.
    return _LogBar(iterable, **{**plain, **kwargs, "leave": True})


def shell_quoted(value: object) -> str:
    """`value` as it must be typed in a command printed for the user to copy: quoted only where a
    shell would split or expand it (a space, a quote, `$`), so ordinary paths print as they are."""
    return shlex.quote(str(value))
