"""Files written whole, and locks that keep two processes from building one output.

A crash, a full disk or Ctrl-C must never leave a half-written dataset, buffer or checkpoint where a
later run would trust it: everything is written to a hidden temporary file in the destination folder
(the same file system, so the final rename is atomic) and renamed on success, with the permissions any
tool's output gets. The temporary file's name carries its writer's host and process, so that the next
write of the same output removes those a killed process (SIGKILL, a power cut) left behind. Programs
check their outputs before the long work that produces them (`check_output`), and a disk that fills
up or a file size limit (`ulimit -f`) struck mid-write is one line naming the file.

Torch files (checkpoints, policy files) carry a checksum of their contents (`with_checksum`): a copy
damaged on its way (flipped bytes in a tensor still load) is refused rather than trained on.

Two runs can aim at one output without anyone meaning it (sweep trials generating one default dataset,
a checkpoint resumed twice). An exclusive `flock` (`exclusive_lock`) is released by the operating system
when its process ends, however it ends, so a lock file left on disk never blocks a later run.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from offline_rl.core.errors import OfflineRLError

if TYPE_CHECKING:
    import h5py
import zipfile

log = logging.getLogger(__name__)

FULL_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
"""Errors of a write that the machine, not the program, caused: the disk, the user's quota or the
file size limit (`ulimit -f`) is full."""


@contextlib.contextmanager
def atomic_path(final_path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path to write to; rename it to `final_path` if the block succeeds.

    The temporary file is removed on any exception, KeyboardInterrupt included. A folder that cannot
    be written, or a disk that fills up, is an `OfflineRLError` naming `final_path`.
    """
    final = Path(final_path).expanduser()
    # Named before the `try`, created inside it: a stop (Ctrl-C, a SIGTERM passed on to a worker) that
    # landed between creating the file and entering the `try` would leave it outside the cleanup below.
    tmp = staging_name(final)
    try:
        create_staging(tmp, final)
        yield tmp
        publish(tmp, final)
    except BaseException as error:
        code = full_disk_errno(error)
        if code is None and isinstance(error, OSError | RuntimeError):  # a writer that lost the errno:
            if _nearly_full(tmp.parent):  # torch.save says "unexpected pos 1621696"
                code = errno.ENOSPC
            elif _at_file_size_limit(tmp):
                code = errno.EFBIG
        with contextlib.suppress(OSError):  # never created, or its folder could not be made
            tmp.unlink()
        if code is not None:
            raise OfflineRLError(f"{final}: not written, {os.strerror(code)} (nothing partial was left)") from None
        raise


def staging_name(final: Path, *, suffix: str = ".part") -> Path:
    """The hidden name, beside `final`, that it is written under until complete (not yet created).
    `suffix` ends it: a writer that picks its format from the name (OpenCV's videos) needs `final`'s."""
    return _temporary_name(final.parent, prefix=f".{final.name}.", suffix=suffix)


def create_staging(tmp: Path, final: Path) -> None:
    """Create the staging file `tmp` of `final` (empty, private; its folder too): one line naming
    `final` where that folder cannot be written. Staging files of `final` that a process of this host
    no longer running left behind go first."""
    remove_abandoned_staging(final)
    _create_empty(tmp, where=str(final))


def remove_abandoned_staging(final: Path) -> list[Path]:
    """Remove the staging files of `final` whose writer, a process of this host, has ended without
    renaming or removing them (killed): they are never completed, and can be as large as the output.
    Another host's (a log folder on a shared file system) and a living process's are left alone."""
    removed = []
    for path in final.parent.glob(glob.escape(f".{final.name}.") + "*"):
        writer = _staging_writer(path.name[len(final.name) + 2 :])
        if writer is None or writer[0] != host_name() or process_alive(writer[1]):
            continue
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(path)
    if removed:
        log.info(f"removed {len(removed)} unfinished temporary file(s) of {final} that a killed process left")
    return removed


_STAGING_TAIL = re.compile(r"(?P<host>[A-Za-z0-9-]+)-(?P<pid>\d+)\.[0-9a-f]{16}\.part(\.\w+)?")


def _staging_writer(tail: str) -> tuple[str, int] | None:
    """(host, process id) of a staging file's name after `.<output>.`; None for any other name."""
    found = _STAGING_TAIL.fullmatch(tail)
    return (found["host"], int(found["pid"])) if found else None


def host_name() -> str:
    """This host's name, as a file name may hold it."""
    return re.sub(r"[^A-Za-z0-9-]+", "-", socket.gethostname()) or "host"


def process_alive(pid: int) -> bool:
    """Whether process `pid` of this host runs (one of another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def publish(tmp: Path, final: Path) -> None:
    """Give the complete staging file `tmp` the permissions of any tool's output and rename it to
    `final` (atomic: the same folder, so the same file system)."""
    if tmp.exists():
        tmp.chmod(0o666 & ~_current_umask())
    os.replace(tmp, final)


@contextlib.contextmanager
def atomic_hdf5(final_path: str | os.PathLike[str]) -> Iterator[h5py.File]:
    """An HDF5 file open for writing that appears at `final_path` only when complete (`atomic_path`).

    Its chunk cache is off. With it, chunks wait in memory and reach the disk when the file closes;
    a disk that fills up then fails inside the close, where h5py crashes the process (h5py issue
    #914, reproduced here with h5py 3 under a file size limit) and the temporary file stays behind.
    Without it, each chunk is written when it is complete and a full disk is an error raised there.
    The writers here hand HDF5 whole arrays or whole chunks, which a cache would not speed up.
    """
    import h5py  # here: the command-line entry points import this module before parsing their flags

    with atomic_path(final_path) as tmp, h5py.File(tmp, "w", rdcc_nbytes=0) as file:
        yield file


NEARLY_FULL_BYTES = 1 << 20
"""Free space below which a failed write is put down to a full disk (read before the unfinished
file is removed, so a disk it filled reads as full)."""


def _nearly_full(folder: Path) -> bool:
    try:
        return shutil.disk_usage(folder).free < NEARLY_FULL_BYTES
    except OSError:
        return False


def _at_file_size_limit(path: Path) -> bool:
    """Whether `path` has reached the process's file size limit (`ulimit -f`), which Python turns
    from a signal into a failed write; a writer may report that without its errno."""
    if resource is None:  # pragma: no cover - Windows
        return False
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    try:
        return limit != resource.RLIM_INFINITY and path.stat().st_size + NEARLY_FULL_BYTES >= limit
    except OSError:
        return False


def full_disk_errno(error: BaseException) -> int | None:
    """The errno of a write refused for lack of space, if that is what `error` is: an OSError's own,
    or the one HDF5 writes into its message ("errno = 28", sometimes inside a RuntimeError)."""
    code = error.errno if isinstance(error, OSError) else None
    if code is None and isinstance(error, OSError | RuntimeError):
        found = re.search(r"errno = (\d+)", str(error))
        code = int(found.group(1)) if found else None
    return code if code in FULL_DISK_ERRNOS else None


def check_output(
    path: str | os.PathLike[str],
    *,
    flag: str,
    overwrite: bool | None = None,
    directory: bool = False,
    appears_whole: bool = False,
) -> Path:
    """Refuse, before the work that produces it, an output that could not be written at the end.

    `flag` names where the path came from in the message (`--output`, or a sentence). `overwrite`
    False refuses an existing output (an empty folder holds nothing to lose and is not one); None
    (outputs that are skipped or reused when present) does not. `directory` says whether the output
    is a folder (run logs, a Minari dataset) or a file. The folder it goes in is created and a probe
    file written there and removed: the one test that answers for permissions, read-only mounts and
    access lists alike. A folder that `appears_whole` (built aside and renamed into place, as a
    Minari dataset is) goes in its parent like a file: creating it here would leave an empty folder
    at its path if the work then failed or was interrupted.
    """
    path = Path(path).expanduser()
    where = f"{flag} {path}"
    if path.exists():
        if directory and not path.is_dir():
            raise OfflineRLError(f"{where}: is a file; expected a folder")
        if not directory and path.is_dir():
            raise OfflineRLError(f"{where}: is a folder; expected a file name")
        empty_folder = directory and not any(path.iterdir())
        if overwrite is False and not empty_folder:
            raise OfflineRLError(f"{where}: already exists (pass --overwrite to replace it)")
    folder = path if directory and not appears_whole else path.parent
    probe = _temporary_name(folder, prefix=".write-check.", suffix="")
    try:
        _create_empty(probe, where=where)
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    return path


def _temporary_name(folder: Path, *, prefix: str, suffix: str) -> Path:
    """A name in `folder` that no file has (64 random bits), for a temporary file not yet created; it
    names the host and process writing it (`remove_abandoned_staging`)."""
    return folder / f"{prefix}{host_name()}-{os.getpid()}.{secrets.token_hex(8)}{suffix}"


def file_in_the_way(folder: Path) -> Path | None:
    """The file where `folder`, or a folder above it, should be (making it would fail); None if none."""
    existing = next((parent for parent in (folder, *folder.parents) if parent.exists()), None)
    return existing if existing is not None and not existing.is_dir() else None


def _create_empty(path: Path, *, where: str) -> None:
    """Create `path` empty and private (0600), its folder first if missing; a folder that cannot be made
    or written is one line naming `where` (the output, or the flag and path) and the reason."""
    folder = path.parent
    if blocking := file_in_the_way(folder):
        raise OfflineRLError(f"{where}: {blocking} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError as error:
        reason = os.strerror(error.errno) if error.errno else str(error)
        raise OfflineRLError(f"{where}: cannot write in {folder} ({reason})") from None


def write_json(path: str | os.PathLike[str], data: Any) -> None:
    """`data` as indented JSON at `path`, atomically (values JSON lacks are written as text)."""
    with atomic_path(path) as part:
        part.write_text(json.dumps(data, indent=1, default=str) + "\n")


def _current_umask() -> int:
    """The process's umask (reading it means setting it; it is set straight back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


try:
    import fcntl
    import resource
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]
    resource = None  # type: ignore[assignment]


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
            log.info(waiting)
            self.acquire(wait=True)

    def release(self) -> None:
        """Give the lock back (closing the file does); safe to call when it is not held."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def load_weights_only(path: Path, map_location: Any) -> Any:
    """`torch.load(path, weights_only=True)`: plain containers, numbers and tensors, never code. torch's
    note on a file pickled with another protocol stays quiet: the file is read or refused in one line
    either way."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
        return torch.load(path, map_location=map_location, weights_only=True)


def unreadable_torch_file(path: Path, error: BaseException) -> str:
    """What a failed `torch.load(..., weights_only=True)` says about the file, in words."""
    if zipfile.is_zipfile(path) and "Weights only load failed" in str(error):
        # a file of another tool's, or one of ours whose pickled index a bad copy changed into another name
        return "a torch file holding Python objects, which offline_rl files never hold (damaged, or another tool's)"
    return "not a file torch.save wrote (damaged, truncated or another format)"


CHECKSUM_KEY = "checksum"
"""The entry of a torch file's dict that holds the checksum of the others (`with_checksum`)."""


def with_checksum(payload: dict[str, Any]) -> dict[str, Any]:
    """`payload` (a dict for `torch.save`) with the SHA-256 of its contents added under `CHECKSUM_KEY`."""
    return {**payload, CHECKSUM_KEY: contents_checksum(payload)}


DAMAGED = (
    "damaged: its contents differ from the checksum written with them (a bad copy or a failing disk); use another copy"
)
"""What a torch file that `damaged` finds is, in words."""


def damaged(payload: dict[str, Any]) -> bool:
    """Whether a loaded torch file's contents differ from the checksum written with them. A file
    written before files carried one is taken as it is."""
    recorded = payload.get(CHECKSUM_KEY)
    if recorded is None:
        return False
    return recorded != contents_checksum({key: value for key, value in payload.items() if key != CHECKSUM_KEY})


def contents_checksum(value: Any) -> str:
    """SHA-256 of nested dicts, lists, tensors, arrays and plain values, as `torch.load` gives them back:
    tensors by dtype, shape and bytes wherever they live, dicts in key order."""
    digest = hashlib.sha256()
    _feed(digest, value)
    return "sha256:" + digest.hexdigest()


def _feed(digest: Any, value: Any) -> None:
    import numpy as np
    import torch  # here: the command-line entry points import this module before parsing their flags

    if isinstance(value, dict):
        digest.update(b"{%d;" % len(value))
        for key in sorted(value, key=repr):
            _feed(digest, key)
            _feed(digest, value[key])
    elif isinstance(value, list | tuple):
        digest.update(b"[%d;" % len(value))
        for item in value:
            _feed(digest, item)
    elif isinstance(value, torch.Tensor):
        flat = value.detach().cpu().contiguous().reshape(-1)
        digest.update(f"T{flat.dtype}{tuple(value.shape)};".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    elif isinstance(value, np.ndarray):
        digest.update(f"A{value.dtype}{value.shape};".encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    else:
        digest.update(f"{type(value).__name__}:{value!r};".encode())
