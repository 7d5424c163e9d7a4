"""Reading the gzip-compressed `.npy` arrays of a Dopamine replay checkpoint a block at a time.

Dopamine saves each replay array with `np.save` inside a `gzip.GzipFile`. The observation array of
one DQN Replay checkpoint is 1M frames of 84x84 (7 GB once inflated), so it is never inflated whole:
the header is parsed and rows are read as they are needed, which also lets a converter that keeps
only a checkpoint's first slots stop reading there.
"""

from __future__ import annotations

import gzip
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

from offline_rl.core.errors import DatasetError, DownloadError


class _CountingReader:
    """A file whose reads report the compressed bytes consumed (for a progress bar)."""

    def __init__(self, raw: BinaryIO, on_bytes_read: Callable[[int], None] | None) -> None:
        self._raw = raw
        self._on_bytes_read = on_bytes_read

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        if self._on_bytes_read is not None and data:
            self._on_bytes_read(len(data))
        return data

    def close(self) -> None:
        self._raw.close()


class NpyStream:
    """One gzip-compressed `.npy` file: its shape and dtype at once, its rows on demand."""

    def __init__(self, path: Path | str, on_bytes_read: Callable[[int], None] | None = None) -> None:
        """`path`: a file, or a URL whose response is read as it arrives (only as far as rows are read)."""
        self.path = path
        self._raw = _open_url(path) if isinstance(path, str) else _open_file(path)
        self._reader = _CountingReader(self._raw, on_bytes_read)
        self._gzip = gzip.GzipFile(fileobj=self._reader, mode="rb")  # type: ignore[arg-type]
        self.rows_read = 0
        try:
            version = np.lib.format.read_magic(self._gzip)
            if version == (1, 0):
                shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(self._gzip)
            elif version == (2, 0):
                shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(self._gzip)
            else:
                raise ValueError(f".npy format version {version}")
        except (OSError, EOFError, ValueError, zlib.error) as error:
            self.close()
            raise DatasetError(
                f"{path}: not a gzip-compressed .npy array as Dopamine saves its replay ({error})"
            ) from None
        if dtype.hasobject or (fortran_order and len(shape) > 1):
            self.close()
            raise DatasetError(
                f"{path}: holds a {'pickled' if dtype.hasobject else 'Fortran-ordered'} array, "
                "not one of Dopamine's replay arrays"
            )
        self.shape: tuple[int, ...] = tuple(shape)
        self.dtype: np.dtype = dtype

    def __enter__(self) -> NpyStream:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._gzip.close()
        self._raw.close()

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize

    def read_rows(self, count: int) -> np.ndarray:
        """The next `count` rows (the whole array for a 0-d one); a file that ends early is an error."""
        if not self.shape:
            wanted, shape = self.dtype.itemsize, ()
        else:
            wanted, shape = count * self.row_bytes, (count, *self.shape[1:])
        try:
            data = self._gzip.read(wanted)
        except (OSError, EOFError, zlib.error) as error:
            where = f"rows {self.rows_read} to {self.rows_read + count - 1}" if self.shape else "its value"
            raise DatasetError(
                f"{self.path}: damaged or cut short within {where} ({error}); if it was copied or downloaded, "
                "delete it and run again"
            ) from None
        if len(data) != wanted:
            raise DatasetError(
                f"{self.path}: ends after {self.rows_read + len(data) // max(self.row_bytes, 1)} of its "
                f"{self.shape[0] if self.shape else 1} rows (an interrupted download or copy?)"
            )
        self.rows_read += count
        return np.frombuffer(data, dtype=self.dtype).reshape(shape)

    def blocks(self, count: int, block_rows: int) -> Iterator[np.ndarray]:
        """The next `count` rows, `block_rows` at a time."""
        done = 0
        while done < count:
            rows = min(block_rows, count - done)
            yield self.read_rows(rows)
            done += rows


def _open_file(path: Path) -> BinaryIO:
    try:
        return open(path, "rb")
    except OSError as error:
        raise DatasetError(f"{path}: cannot be read ({error.strerror or error})") from None


def _open_url(url: str, timeout_s: float = 30.0) -> BinaryIO:
    try:
        return urllib.request.urlopen(url, timeout=timeout_s)
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", None) or error
        raise DownloadError(f"{url}: cannot be read ({reason})") from None


def read_npy(path: Path, rows: int | None = None) -> np.ndarray:
    """The first `rows` rows of a gzip-compressed `.npy` file (all of them when None)."""
    with NpyStream(path) as stream:
        if not stream.shape:
            return stream.read_rows(0)
        total = stream.shape[0]
        return stream.read_rows(total if rows is None else min(rows, total))
