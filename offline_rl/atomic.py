"""Write files so that they appear at their final path only when complete.

A crash, a full disk or Ctrl-C must never leave a half-written dataset or buffer where a later run
would trust it: everything is written to a hidden temporary file in the destination directory
(same file system, so the final rename is atomic) and renamed on success. The file then gets the
permissions any tool's output gets (0666 minus the umask), not the 0600 of a private temporary file.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(final_path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path to write to; rename it to `final_path` if the block succeeds.

    The temporary file is removed on any exception, KeyboardInterrupt included.
    """
    final = Path(final_path).expanduser()
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".part", dir=final.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        if tmp.exists():
            tmp.chmod(0o666 & ~_current_umask())
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def write_json(path: str | os.PathLike[str], data: Any) -> None:
    """`data` as indented JSON at `path`, atomically (values JSON lacks are written as text)."""
    with atomic_path(path) as part:
        part.write_text(json.dumps(data, indent=1, default=str) + "\n")


def _current_umask() -> int:
    """The process's umask (reading it means setting it; it is set straight back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask
