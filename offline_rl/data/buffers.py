"""Save and load Tianshou HDF5 replay buffers (the output of `ReplayBuffer.save_hdf5`).

Buffers are written atomically, so a converter interrupted half-way never leaves a file that a
later training run would load as if it were complete.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from tianshou.data import ReplayBuffer

from offline_rl.core.compat import read_buffer_hdf5, write_buffer_hdf5
from offline_rl.core.errors import DatasetError
from offline_rl.core.files import atomic_hdf5, atomic_path
from offline_rl.core.resources import require_memory
from offline_rl.data.frame_pool import FRAME_POOL_MARKER, POOL_KEYS, REQUIRED_META_KEYS, FramePoolBuffer
from offline_rl.data.frame_stack import FRAME_STACK_MARKER, FrameStackBuffer, merge_frame_stack_buffers
from offline_rl.data.hdf5_files import hdf5_errors_named, hdf5_for_reading, is_tianshou_buffer_file
from offline_rl.data.names import combined_label
from offline_rl.data.transitions import (
    combined_info,
    dataset_info,
    require_finite,
    require_no_negative_actions,
    set_dataset_info,
    set_source_sizes,
)

BUFFER_KEYS = ("obs", "act", "rew", "terminated", "truncated", "done")
FRAME_STACK_KEYS = ("frames", "frame_index", "episode_first_frame", "act", "rew", "terminated", "truncated", "done")
_ROOT_KEYS = ("frames", "frame_index", "episode_first_frame", "obs_frames", "obs_next_frames")


def save_buffer(buffer: ReplayBuffer, path: str | os.PathLike[str], *, compression: str | None = None) -> Path:
    """Write `buffer` to `path` in Tianshou's HDF5 format (what its `save_hdf5` writes); the file
    appears only when complete. The buffers made here are written into a file `atomic_hdf5` opened,
    so that a full disk is one line rather than a crash; a class with a `save_hdf5` of its own (a
    subclass of Tianshou's, such as its HER buffer) writes itself, its own way."""
    final = Path(path).expanduser()
    writes_itself = type(buffer).save_hdf5
    if writes_itself is FramePoolBuffer.save_hdf5 or writes_itself is ReplayBuffer.save_hdf5:
        with atomic_hdf5(final) as file:
            if isinstance(buffer, FramePoolBuffer):
                buffer.write_hdf5(file, compression=compression)
            else:
                write_buffer_hdf5(buffer, file, compression=compression)
    else:
        with atomic_path(final) as tmp:
            buffer.save_hdf5(str(tmp), compression=compression)
    return final


def _buffer_class(file_path: Path) -> type[ReplayBuffer]:
    """Which class reads this file, after checking that it is a complete buffer file."""
    if not file_path.is_file():
        raise DatasetError(f"{file_path}: no such file")
    with hdf5_for_reading(file_path) as file:
        if not is_tianshou_buffer_file(file):
            raise DatasetError(f"{file_path}: not a Tianshou replay buffer (no '_meta' group / 'maxsize' attribute)")
        frame_stacked = FRAME_STACK_MARKER in file
        frame_pool = FRAME_POOL_MARKER in file
        meta = file["_meta"]
        if frame_pool:
            required: tuple[str, ...] = POOL_KEYS + REQUIRED_META_KEYS
        else:
            required = FRAME_STACK_KEYS if frame_stacked else BUFFER_KEYS
        if not frame_pool and len(meta) == 0:  # Tianshou saves an empty buffer with no columns at all
            raise DatasetError(f"{file_path}: buffer holds no transitions")
        missing = [key for key in required if key not in (file if key in _ROOT_KEYS else meta)]
        if missing:
            where = missing[0] if missing[0] in _ROOT_KEYS else f"_meta/{missing[0]}"
            raise DatasetError(f"{file_path}: buffer is missing key '{where}'")
    return FramePoolBuffer if frame_pool else FrameStackBuffer if frame_stacked else ReplayBuffer


def _file_bytes(file_path: Path) -> int:
    """What the file's arrays take in memory once read (uncompressed)."""
    total = 0

    def add(_name: str, item: object) -> None:
        nonlocal total
        if isinstance(item, h5py.Dataset):
            total += item.size * item.dtype.itemsize

    with hdf5_for_reading(file_path) as file:
        file.visititems(add)
    return total


def _require_memory(need: int, source: str) -> None:
    """Refuse a load that would end with the OOM killer's "Killed", minutes in and without a word."""
    require_memory(need, f"{source}: loading", "free memory, load fewer files, or use a machine with more")


def _frame_count(file_path: Path) -> int:
    with hdf5_for_reading(file_path) as file:
        return int(file["frames"].shape[0])


def _checked(buffer: ReplayBuffer, source: str) -> ReplayBuffer:
    if len(buffer) == 0:
        raise DatasetError(f"{source}: buffer holds no transitions")
    require_finite(np.asarray(buffer.rew[: len(buffer)]), source=source, key="_meta/rew")
    require_no_negative_actions(np.asarray(buffer.act[: len(buffer)]), source=source, key="_meta/act")
    _require_frames_in_range(buffer, source)
    return buffer


def _require_frames_in_range(buffer: ReplayBuffer, source: str) -> None:
    """A frame buffer's stacks index its pool of frames. An index outside it (a damaged file) would
    otherwise stop training at the first batch that draws it, hours in, with an IndexError, or on a GPU
    with a device-side assert; a negative one would silently wrap to another frame."""
    if isinstance(buffer, FrameStackBuffer):
        newest, first = buffer.frame_index[: len(buffer)], buffer.episode_first_frame[: len(buffer)]
        # each transition's stacks end at its newest frame and the one after it, from its episode's first
        outside = (newest < 0) | (newest + 1 >= len(buffer.frames)) | (first < 0) | (first > newest)
        key = "frame_index/episode_first_frame"
    elif isinstance(buffer, FramePoolBuffer):
        stacks = np.hstack([buffer.obs_frames, buffer.obs_next_frames])
        outside = ((stacks < 0) | (stacks >= len(buffer.frames))).any(axis=1)
        key = "obs_frames/obs_next_frames"
    else:
        return
    if outside.any():
        raise DatasetError(
            f"{source}: '{key}' of {int(outside.sum())} transitions (the first: {int(np.argmax(outside))}) point "
            f"outside the {len(buffer.frames)} frames stored; the file is damaged: make it again"
        )


def load_buffer(path: str | os.PathLike[str]) -> ReplayBuffer:
    """Load a Tianshou HDF5 buffer: Tianshou's own (frame-stacked ones with `stack_num > 1` included),
    this package's `FrameStackBuffer` (Atari collection) or `FramePoolBuffer` (RL Unplugged
    conversion), recognised by content."""
    file_path = Path(path).expanduser()
    buffer_class = _buffer_class(file_path)
    _require_memory(_file_bytes(file_path), str(file_path))
    return _load(file_path, buffer_class)


def _load(file_path: Path, buffer_class: type[ReplayBuffer]) -> ReplayBuffer:
    with hdf5_errors_named(file_path):
        if buffer_class is ReplayBuffer:  # Tianshou's class, whose own loader copies each array twice
            buffer = read_buffer_hdf5(ReplayBuffer, str(file_path))
        else:  # this package's frame buffers read themselves
            buffer = buffer_class.load_hdf5(str(file_path))
    return _checked(buffer, str(file_path))


def load_buffers(paths: Sequence[str | os.PathLike[str]]) -> ReplayBuffer:
    """One buffer from one file, or from several frame-buffer files of one kind (RL Unplugged shards
    and DQN Replay checkpoints, converted; or `atari_qrdqn.py` collections), episodes intact."""
    if len(paths) == 1:
        return load_buffer(paths[0])
    file_paths = [Path(path).expanduser() for path in paths]
    classes = [_buffer_class(path) for path in file_paths]
    for path, buffer_class in zip(file_paths, classes, strict=True):
        if buffer_class is ReplayBuffer or buffer_class is not classes[0]:
            raise DatasetError(
                f"{path}: several buffers combine only when all are RL Unplugged or DQN Replay conversions or "
                f"all are atari_qrdqn.py collections (this one is a {buffer_class.__name__}, "
                f"the first a {classes[0].__name__})"
            )
    sizes = [_file_bytes(path) for path in file_paths]
    pooled = classes[0] is FramePoolBuffer  # read straight into the result; stacks load a file at a time beside it
    _require_memory(sum(sizes) + (0 if pooled else max(sizes)), combined_label(list(map(str, file_paths))))
    transitions: list[int] = []
    if pooled:
        with hdf5_errors_named(combined_label(list(map(str, file_paths)))):
            buffer: ReplayBuffer = FramePoolBuffer.load_many(file_paths, transitions=transitions)
    else:
        frames = sum(_frame_count(path) for path in file_paths)
        infos: list[dict[str, Any]] = []

        def loaded() -> Iterator[ReplayBuffer]:
            for path in file_paths:
                part = _load(path, FrameStackBuffer)
                infos.append(dataset_info(part))
                transitions.append(len(part))
                yield part
                del part  # copied into the result by now: no name holds a file while the next loads

        buffer = merge_frame_stack_buffers(loaded(), total_frames=frames)  # type: ignore[arg-type]
        set_dataset_info(buffer, combined_info(infos))
    set_source_sizes(buffer, transitions)
    return _checked(buffer, combined_label(list(map(str, file_paths))))
