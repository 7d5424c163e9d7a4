"""Fetch a dataset file over HTTP(S) with a progress bar, atomically.

Downloads are large (GBs) and are the step most likely to be cut short; the file appears at its
final path only once complete, so a later run never trusts half a file. Without network the error
names the URL and where to put a copy made elsewhere.
"""

from __future__ import annotations

import os
import socket
import urllib.error
import urllib.request
from pathlib import Path

from offline_rl.atomic import atomic_path
from offline_rl.errors import DownloadError
from offline_rl.progress import progress_bar


def download_file(url: str, destination: Path, *, hint: str = "", timeout_s: float = 30.0) -> None:
    """Fetch `url` to `destination`; `hint` ends the error message (e.g. an environment variable to set)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            total = int(response.headers.get("Content-Length") or 0) or None
            with (
                atomic_path(destination) as tmp,
                open(tmp, "wb") as out,
                progress_bar(total=total, unit="B", unit_scale=True, desc=f"download {destination.name}") as bar,
            ):
                while chunk := response.read(1 << 20):
                    out.write(chunk)
                    bar.update(len(chunk))
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", None) or error
        where = f"copy the file to that path{f' ({hint})' if hint else ''} and run again"
        raise DownloadError(
            f"dataset not found at {destination} and the download from {url} failed ({reason}); {where}"
        ) from None


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
