"""SIGTERM stops a command as Ctrl-C does, and a collection stops only between two steps.

Cluster schedulers and container runtimes end a job with SIGTERM, then SIGKILL after a grace
period: Slurm's `scancel`, time limit and preemption, Kubernetes evictions, `timeout`. Python's
default is to die at once on SIGTERM, so a run said nothing, a collection lost the steps since its
last kept part, and a file being written left its temporary behind. Inside
`sigterm_stops_like_ctrl_c()` (every command runs in it, in `run_main`) SIGTERM raises
`Terminated`, a KeyboardInterrupt: every `except KeyboardInterrupt` on the way out runs as for
Ctrl-C (parts kept, temporaries removed, "interrupted after ...; continue with --resume-path ..."
printed), and the command exits with 143, the status a shell gives a process that SIGTERM ended.
Env worker processes forked inside inherit the handler; Tianshou's workers close on a KeyboardInterrupt.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM
STOPPED_STATUSES = (EXIT_INTERRUPTED, EXIT_TERMINATED, -signal.SIGINT, -signal.SIGTERM)
"""Exit statuses of a command that was told to stop (Ctrl-C, SIGTERM), rather than one that failed."""


class Terminated(KeyboardInterrupt):
    """The KeyboardInterrupt SIGTERM raises: handled wherever Ctrl-C is."""


def exit_status(interrupt: KeyboardInterrupt) -> int:
    """130 after Ctrl-C, 143 after SIGTERM: what a shell reports for a process the signal ended."""
    return EXIT_TERMINATED if isinstance(interrupt, Terminated) else EXIT_INTERRUPTED


def raise_terminated(signum: int, frame: Any) -> None:
    # Once: a second SIGTERM (a scheduler signals every process, and a parent passes it on to its
    # workers) must not interrupt the clean-up the first one started. SIGKILL follows if it hangs.
    signal.signal(signal.SIGTERM, _already_stopping)
    raise Terminated


def _already_stopping(signum: int, frame: Any) -> None:
    """SIGTERM while a command is already stopping on one: nothing more to do."""


@contextlib.contextmanager
def sigterm_stops_like_ctrl_c() -> Iterator[None]:
    """Inside, SIGTERM raises `Terminated`; the previous handler is back afterwards. Where another
    handler is in place (or outside the main thread), nothing changes."""
    in_main_thread = threading.current_thread() is threading.main_thread()
    if not in_main_thread or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


# signal: (its handler when it stops a command, what that handler raises)
_STOPPING = {
    signal.SIGINT: (signal.default_int_handler, KeyboardInterrupt),
    signal.SIGTERM: (raise_terminated, Terminated),
}


@contextlib.contextmanager
def _stopping_handlers_replaced_by(replacement: Callable[[int, Any], None]) -> Iterator[None]:
    """Put `replacement` in place of each stopping handler (`_STOPPING`) now installed, and put
    them back on the way out. Only those: a signal ignored here (Ctrl-C in a background job) stays
    ignored, and outside the main thread, where handlers cannot be set, nothing changes."""
    replaced: list[int] = []
    try:
        if threading.current_thread() is threading.main_thread():
            for signum, (handler, _) in _STOPPING.items():
                if signal.getsignal(signum) is handler:
                    replaced.append(signum)
                    signal.signal(signum, replacement)
        yield
    finally:
        for signum in replaced:
            signal.signal(signum, _STOPPING[signum][0])


def _raise_held(received: list[int]) -> None:
    """Once every handler is back, let the first signal held run its own handler, which raises."""
    if received:
        _STOPPING[received[0]][0](received[0], None)


@contextlib.contextmanager
def interrupts_between_steps() -> Iterator[Callable[[], None]]:
    """Make Ctrl-C (and SIGTERM) stop a collection where the returned check is called, between steps.

    An interrupt raised inside a recorder's `add` would leave its columns of unequal lengths, and
    the part kept on the way out would hold a transition torn in two. A second signal before the
    check (an env that hangs) interrupts at once, and one after the last check is raised as the
    block ends rather than lost. Outside the main thread, or for a signal that does not interrupt
    here (Ctrl-C ignored in a background job), nothing changes."""
    received: list[int] = []
    raised: list[bool] = []

    def defer(signum: int, frame: Any) -> None:
        if received:
            raised.append(True)
            raise _STOPPING[signum][1]
        received.append(signum)

    def stop_if_interrupted() -> None:
        if received:
            raised.append(True)
            raise _STOPPING[received[0]][1]

    with _stopping_handlers_replaced_by(defer):
        yield stop_if_interrupted
    if not raised:  # one that arrived after the last check, as the handlers were put back
        _raise_held(received)


def interrupts_held_during(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function`, with Ctrl-C and SIGTERM held while it runs and raised as it returns.

    For calls into a library that takes a lock a signal must not interrupt: TensorBoard's event
    writer takes one on every write, and a stop raised while the main thread held it once left the
    lock taken, so closing the log on the way out waited forever (a run stopped by SIGTERM printed
    how to resume and never exited). A second signal during the call interrupts at once. A signal
    held is raised by its own handler once every handler is back, so none arriving while they are
    put back is lost."""

    @functools.wraps(function)
    def held(*args: Any, **kwargs: Any) -> Any:
        received: list[int] = []

        def hold(signum: int, frame: Any) -> None:
            if received:
                _STOPPING[signum][0](signum, frame)
            received.append(signum)

        with _stopping_handlers_replaced_by(hold):
            result = function(*args, **kwargs)
        _raise_held(received)
        return result

    return held


@dataclass
class DeferredStop:
    """A stop (Ctrl-C, SIGTERM) that, while `deferring`, waits for `raise_if_requested`."""

    deferring: bool = True
    received: list[int] = field(default_factory=list)

    @property
    def requested(self) -> bool:
        return bool(self.received)

    def raise_if_requested(self) -> None:
        """Raise the stop that arrived while deferring, if one did, through its own handler."""
        if self.received:
            signum = self.received.pop(0)
            self.received.clear()
            _STOPPING[signum][0](signum, None)


@contextlib.contextmanager
def stops_deferred() -> Iterator[DeferredStop]:
    """Inside, Ctrl-C and SIGTERM wait while the yielded `DeferredStop` is `deferring`, until its
    `raise_if_requested` is called: a training loop stops between two updates, never inside one,
    so that what it saves on the way out is a state the uninterrupted run passed through. While not
    deferring they stop at once, and so does a second signal (an update that hangs). One still
    waiting as the block ends is raised there. Outside the main thread nothing changes."""
    stop = DeferredStop()

    def defer(signum: int, frame: Any) -> None:
        if stop.deferring and not stop.received:
            stop.received.append(signum)
            return
        _STOPPING[signum][0](signum, frame)

    with _stopping_handlers_replaced_by(defer):
        yield stop
    _raise_held(stop.received)
