"""Reading a dataset's HDF5 file, with h5py's errors turned into one line naming the file.

A damaged file (a truncated download, a bad copy, a disk error) fails inside h5py in many ways: HDF5's
OSError when a file does not open or a chunk does not read, and RuntimeError, KeyError or ValueError when
the structure it walks (object headers, B-trees, heaps, attributes) is corrupt. Whatever h5py raises while
a file is read is the file's fault, not the reader's, so it is one `DatasetError` for the user.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import h5py

from offline_rl.core.errors import DatasetError, OfflineRLError, first_line


def raised_by_h5py(error: BaseException) -> bool:
    """Whether h5py itself raised `error` (its innermost frame is h5py's, Python or Cython), rather than
    code reading the values it returned."""
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and "h5py" in Path(frames[-1].filename).parts


def says_file_is_damaged(error: BaseException) -> bool:
    """Whether an exception met while reading one of offline_rl's own HDF5 files (a replay kept for a
    resume, a collection's parts) means the file is damaged: h5py's, or a value read from it that does
    not parse (KeyError, ValueError)."""
    return isinstance(error, OSError | KeyError | ValueError) or raised_by_h5py(error)


@contextmanager
def hdf5_errors_named(path: str | Path) -> Iterator[None]:
    """Inside the block, HDF5's OSErrors and any exception raised by h5py are a `DatasetError` naming `path`."""
    try:
        yield
    except OfflineRLError:
        raise
    except Exception as error:
        if isinstance(error, OSError) or raised_by_h5py(error):
            raise DatasetError(f"{path}: not a readable HDF5 file ({first_line(error)})") from None
        raise


@contextmanager
def hdf5_for_reading(path: Path) -> Iterator[h5py.File]:
    """`path` opened read-only, h5py's errors while it is open named as `hdf5_errors_named` names them."""
    with hdf5_errors_named(path), h5py.File(path, "r") as file:
        yield file


def d3rlpy_layout(file: h5py.File) -> str | None:
    """`"2.1"` or `"1.x"` for a file d3rlpy wrote, None for any other HDF5 file."""
    if "columns" in file and ("num_episodes" in file or "version" in file):
        return "2.1"
    if "observations" in file and "episode_terminals" in file:
        return "1.x"
    return None


def is_tianshou_buffer_file(file: h5py.File) -> bool:
    """Whether an open HDF5 file has the layout `ReplayBuffer.save_hdf5` writes."""
    return isinstance(file.get("_meta"), h5py.Group) and "maxsize" in file.attrs


def hdf5_layout(file: h5py.File) -> str | None:
    """Which of the HDF5 layouts read here an open file has: `tianshou` (a saved buffer), `d3rlpy` (either
    of d3rlpy's layouts, checked before D4RL's keys, which d3rlpy 1.x's files also have), `d4rl`, or None."""
    if is_tianshou_buffer_file(file):
        return "tianshou"
    if d3rlpy_layout(file):
        return "d3rlpy"
    if "observations" in file:
        return "d4rl"
    return None
