"""Fetch a dataset file over HTTP(S) with a progress bar, atomically, once, resuming where it stopped.

Downloads are large and are the step most likely to be cut short. The file appears at its final path
only once complete; without network the error names the URL and where to put a copy made elsewhere.
Processes that need the same missing file at once download it once: the first holds a lock beside the
file, the others wait and then find it there.

A stopped download keeps its bytes beside the file under a hidden name, with the URL, the server's
version of the file (its ETag, else its Last-Modified date) and its size. The next download asks for the
rest with `Range` and `If-Range`: a server that still has that version sends the rest (206); any other
answer is the whole file again.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import re
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from typing import BinaryIO

from offline_rl.core.errors import DownloadError
from offline_rl.core.files import FULL_DISK_ERRNOS, FileLock, atomic_path, file_in_the_way
from offline_rl.core.progress import Meter, bar_meter, progress_bar

log = logging.getLogger(__name__)


def download_file(
    url: str, destination: Path, *, hint: str = "", timeout_s: float = 30.0, meter: Meter | None = None
) -> None:
    """Fetch `url` to `destination` unless another process has meanwhile; `hint` ends the error message
    (e.g. an environment variable to set). The bytes are counted on a bar of the download's own, or on
    `meter` (a bar shared by several downloads, in worker processes too)."""
    _require_folder(destination, hint)
    with _first_to_download(destination) as needed:
        if needed:
            _fetch(url, destination, hint, timeout_s, meter)


def _require_folder(destination: Path, hint: str) -> None:
    """One line when the folder a download goes to is a file, or lies under one (a dataset directory
    variable set to a file's path): the download would otherwise fail on its lock or its partial bytes
    with an OSError naming neither."""
    if blocking := file_in_the_way(destination.parent):
        raise DownloadError(
            f"{destination}: cannot be downloaded there, {blocking} is a file, not a folder{_to_a_folder(hint)}"
        )


def _to_a_folder(hint: str) -> str:
    """`hint` ("or set D4RL_DATASET_DIR") as the fix for a download folder that is a file."""
    return f"; {hint.removeprefix('or ')} to a folder" if hint else ""


@contextlib.contextmanager
def _first_to_download(destination: Path) -> Iterator[bool]:
    """Hold the file's download lock; yields whether the file is still missing. The lock file is then
    removed by whoever holds it: a process still waiting on it finds the file (or downloads it), and one
    arriving later takes a new lock. Except while a stopped download's bytes are kept: the next ones,
    resuming from them, must take turns on the same lock."""
    lock = FileLock(destination.with_name(f".{destination.name}.download-lock"))
    try:
        lock.acquire_after(f"{destination}: another process is downloading it; waiting for it")
    except OSError:  # a folder that cannot be written: the download says so, naming the file
        lock = None
    try:
        yield not destination.exists()
    finally:
        if lock is not None:
            if destination.exists() or not PartialDownload(destination).data.exists():
                with contextlib.suppress(FileNotFoundError):
                    lock.path.unlink()
            lock.release()


def _fetch(url: str, destination: Path, hint: str, timeout_s: float, meter: Meter | None) -> None:
    partial = PartialDownload(destination)
    resume = partial.resume_point(url)
    kept = 0
    try:
        response = urllib.request.urlopen(
            urllib.request.Request(url, headers=partial.request_headers(resume)), timeout=timeout_s
        )
        offset = partial.offset_sent(resume, getattr(response, "status", None), response.headers)
        if offset is None:  # the rest of another version (a server that ignores If-Range): ask for it whole
            response.close()
            response, offset = urllib.request.urlopen(url, timeout=timeout_s), 0
        with response:
            length = int(response.headers.get("Content-Length") or 0)
            size = offset + length if length else 0
            with atomic_path(destination) as tmp:
                if offset:
                    partial.continue_in(tmp)
                else:
                    partial.discard()
                try:
                    received = offset + _receive(response, tmp, destination, meter, size, offset)
                    if size and received != size:  # http.client ends a body cut short quietly, as if complete
                        raise _CutShort(f"the connection closed after {received} of its {size} bytes")
                except BaseException as error:
                    kept = partial.keep(tmp, url, response.headers, size, error)
                    raise
            partial.discard()
    except (urllib.error.URLError, OSError, http.client.HTTPException, _CutShort) as error:
        reason = getattr(error, "reason", None) or error
        raise download_error(url, destination, reason, hint, kept=kept) from None
    except KeyboardInterrupt:
        if kept:
            log.info(f"{destination}: download stopped after {_megabytes(kept)}; the next run resumes it")
        raise


class _CutShort(Exception):
    pass


def _receive(response: BinaryIO, tmp: Path, destination: Path, meter: Meter | None, size: int, offset: int) -> int:
    """Append the response's bytes to `tmp`, counted on `meter` or on a bar of their own; how many came."""
    with open(tmp, "ab") as out:
        if meter is not None:
            if size:  # unknown without a Content-Length
                meter.grow(size)
            if offset:
                meter.advance(offset)
            return _copy(response, out, meter)
        desc = f"download {destination.name}"
        with progress_bar(total=size or None, initial=offset, unit="B", unit_scale=True, desc=desc) as bar:
            return _copy(response, out, bar_meter(bar))


def _copy(response: BinaryIO, out: BinaryIO, meter: Meter) -> int:
    received = 0
    while chunk := response.read(1 << 20):
        out.write(chunk)
        meter.advance(len(chunk))
        received += len(chunk)
    return received


def _megabytes(count: int) -> str:
    return f"{count / 1e6:.1f} MB"


def download_error(url: str, destination: Path, reason: object, hint: str = "", kept: int = 0) -> DownloadError:
    where = f"copy the file to that path{f' ({hint})' if hint else ''} and run again"
    if kept:
        where = f"run again to resume from the {_megabytes(kept)} received, or {where.replace(' and run again', '')}"
    return DownloadError(f"dataset not found at {destination} and the download from {url} failed ({reason}); {where}")


def check_reachable(url: str, destination: Path, hint: str = "") -> None:
    """Fail at once, as `download_file` would, when `url`'s host cannot be reached: before a batch of
    downloads spread over worker processes, each of which would otherwise wait out its own timeout."""
    address = urllib.parse.urlsplit(url)
    if address.scheme not in ("http", "https") or not address.hostname:
        return
    problem = unreachable(address.hostname, address.port or (443 if address.scheme == "https" else 80))
    if problem:
        raise download_error(url, destination, problem, hint)


PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def unreachable(host: str, port: int = 443, timeout_s: float = 5.0) -> str | None:
    """Why `host` cannot be reached, found in seconds; None when it can (or when a proxy is set,
    which a direct connection cannot judge). Clients that retry for half a minute before failing
    are asked only after this says the network is there."""
    if any(os.environ.get(name) for name in PROXY_VARIABLES):
        return None
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as error:
        return f"cannot reach {host}: {error.strerror or error}"


@dataclass(frozen=True)
class Resume:
    """Where a kept download stops, and the version of the file it is part of."""

    offset: int
    version: str
    size: int


@dataclass(frozen=True)
class PartialDownload:
    destination: Path

    @property
    def data(self) -> Path:
        return self.destination.with_name(f".{self.destination.name}.partial")

    @property
    def record(self) -> Path:
        return self.destination.with_name(f".{self.destination.name}.partial.json")

    def resume_point(self, url: str) -> Resume | None:
        """The kept part of `url`'s download, if there is one to go on from (anything else is dropped)."""
        try:
            record = json.loads(self.record.read_text())
            offset = self.data.stat().st_size
            if record["url"] == url and 0 < offset < int(record["size"]):
                return Resume(offset, str(record["version"]), int(record["size"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass
        self.discard()
        return None

    @staticmethod
    def request_headers(resume: Resume | None) -> dict[str, str]:
        if resume is None:
            return {}
        return {"Range": f"bytes={resume.offset}-", "If-Range": resume.version}

    @staticmethod
    def offset_sent(resume: Resume | None, status: int | None, headers: Message) -> int | None:
        """Where the response's bytes start in the file: 0 for the whole file, the kept offset when the
        server sent the rest of the same version (206, its range starting there, the same total); None
        for a part that does not continue the kept bytes (a server that honours `Range` but not
        `If-Range` sends the rest of a file changed since)."""
        if status != 206:
            return 0
        sent = re.fullmatch(r"bytes (\d+)-\d+/(\d+)", headers.get("Content-Range", "").strip())
        if resume is None or sent is None or (int(sent.group(1)), int(sent.group(2))) != (resume.offset, resume.size):
            return None
        return resume.offset

    def continue_in(self, temporary: Path) -> None:
        """Move the kept bytes to the download's temporary file, to append the rest to."""
        os.replace(self.data, temporary)

    def keep(self, temporary: Path, url: str, headers: Message, size: int, error: BaseException) -> int:
        """Set a stopped download's bytes aside for the next run; how many were kept (0: not resumable,
        because the server gave no size or version, nothing came, or the disk is full)."""
        version = headers.get("ETag") or headers.get("Last-Modified")
        received = temporary.stat().st_size if temporary.exists() else 0
        full_disk = isinstance(error, OSError) and error.errno in FULL_DISK_ERRNOS
        if not version or not size or not 0 < received < size or full_disk:
            return 0
        try:
            os.replace(temporary, self.data)
            self.record.write_text(json.dumps({"url": url, "version": version, "size": size}))
        except OSError:  # the error that stopped the download is the one to report
            self.discard()
            return 0
        return received

    def discard(self) -> None:
        for path in (self.data, self.record):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
