"""Opening a dataset's HDF5 file to read, with h5py's errors turned into one line naming the file."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import h5py

from offline_rl.errors import DatasetError


def first_line(error: BaseException) -> str:
    """An exception's message cut to its first line (HDF5's errors run to several), or its type's name."""
    return str(error).splitlines()[0] if str(error) else type(error).__name__


@contextmanager
def hdf5_for_reading(path: Path) -> Iterator[h5py.File]:
    """`path` opened read-only. A file HDF5 cannot open, and data it cannot read inside the block
    (a truncated download, a damaged chunk), are `DatasetError`s: one line for the user, no traceback."""
    try:
        file = h5py.File(path, "r")
    except OSError as error:
        raise DatasetError(f"{path}: not a readable HDF5 file ({first_line(error)})") from None
    try:
        with file:
            yield file
    except OSError as error:
        raise DatasetError(f"{path}: corrupt HDF5 data ({first_line(error)})") from None
