"""A run's TensorBoard writer, made safe to stop and honest about a disk that refuses it.

Ctrl-C and SIGTERM are held during each of the writer's calls: TensorBoard's event writer takes a
lock on every write, and a stop raised while the main thread held it once left the lock taken, so
closing the log on the way out waited forever. A write the machine refuses (a full disk, a quota, a
file size limit) is one line naming the log folder, where TensorBoard's own thread printed a
traceback and the run then failed with a line naming no file.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from typing import Any

from offline_rl.core.errors import OfflineRLError
from offline_rl.core.files import full_disk_errno
from offline_rl.core.interrupts import interrupts_held_during

WRITER_METHODS = ("add_scalar", "add_text", "add_histogram", "add_figure", "flush", "close")
"""The TensorBoard writer's methods the run, its reporter and Tianshou's logger call."""


def uninterrupted_writes(writer: Any) -> Any:
    """`writer` with Ctrl-C and SIGTERM held during each of its calls (`interrupts_held_during`), so
    that a run stopped mid-write closes its log and exits; and a write the machine refuses (a full
    disk, a quota, a file size limit) one line naming the log folder. TensorBoard writes from a
    thread of its own, which meets the error first and hands it to the next call here; that thread's
    own traceback is kept quiet."""
    for name in WRITER_METHODS:
        setattr(writer, name, _refusals_named(interrupts_held_during(getattr(writer, name)), writer.get_logdir()))
    if threading.excepthook is not _quiet_event_writer:
        global _excepthook_before
        _excepthook_before, threading.excepthook = threading.excepthook, _quiet_event_writer
    return writer


def _refusals_named(method: Callable[..., Any], folder: str) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except (OSError, RuntimeError) as error:
            code = full_disk_errno(error)
            if code is None:
                raise
            raise OfflineRLError(f"{folder}: TensorBoard events not written, {os.strerror(code)}") from None

    return call


_excepthook_before = threading.excepthook


def _quiet_event_writer(args: Any) -> None:
    """Python's hook for an exception that ends a thread, silent for TensorBoard's event writer
    refused by the disk (the run says so in one line)."""
    if type(args.thread).__name__ == "_AsyncWriterThread" and full_disk_errno(args.exc_value) is not None:
        return
    _excepthook_before(args)
