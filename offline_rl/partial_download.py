"""What a stopped download leaves for the next one to resume from.

Dataset files are GBs, and a download stopped at 90% (Ctrl-C, a dropped connection, a job's time
limit) should not start again from zero. Its bytes are kept beside the file under a hidden name,
with a record of the URL, the server's version of the file (its ETag, or else its Last-Modified
date) and its full size. The next download asks for the rest with `Range` and `If-Range`: a server
that still has that version sends the rest (206), any other answer is the whole file again (the
kept bytes are then dropped). Only a download whose size and version the server gave can resume;
the final file still appears only when complete (`offline_rl.atomic.atomic_path`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass
from email.message import Message
from pathlib import Path

from offline_rl.atomic import FULL_DISK_ERRNOS


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
