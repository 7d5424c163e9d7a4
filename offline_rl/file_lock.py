"""Exclusive locks on files, so that two processes never build one output together.

Two runs can aim at one output without anyone meaning it: sweep trials started together all
generate the same default dataset in the cache, a collection command started twice shares its
parts folder, and a checkpoint resumed twice has two processes writing one run folder. Each file
is written atomically, but a shared folder is not: one process removes the parts while the other
still writes there, or overwrites the checkpoints and logs the other writes. A lock taken with
`flock` is released by the operating system when its process ends, however it ends (Ctrl-C, a
crash, the OOM killer), so a lock file left on disk never blocks a later run. Where `fcntl` does
not exist (Windows) the lock is not taken and runs behave as before.
"""

from __future__ import annotations

import os
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


class FileLock:
    """An exclusive lock on `path` (created, with its folder, if missing), held until `release`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, *, wait: bool) -> bool:
        """Take the lock; with `wait` False, return False at once when another process holds it."""
        if fcntl is None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return True

    def acquire_after(self, waiting: str) -> None:
        """Take the lock, printing `waiting` first if another process holds it (so a run that seems to
        hang says what it waits for)."""
        if not self.acquire(wait=False):
            print(waiting, flush=True)
            self.acquire(wait=True)

    def release(self) -> None:
        """Give the lock back (closing the file does); safe to call when it is not held."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
