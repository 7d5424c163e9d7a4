"""Helpers for buffers that rebuild observations at sample time (frame stacks, frame pools).

Sampling a batch of 32 Atari transitions is a few tens of microseconds of frame copying; Python-side
bookkeeping (index conversion, `Batch` construction) would otherwise be a third of it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def as_indices(index: Any, size: int) -> tuple[np.ndarray, bool]:
    """(1-D index array, whether `index` was a scalar) for anything `ReplayBuffer.__getitem__` accepts.

    A 1-D integer array — what sampling passes — goes through untouched, so the hot path costs nothing.
    """
    if isinstance(index, np.ndarray) and index.ndim == 1:
        return index, False
    indices = np.arange(size)[index] if isinstance(index, slice) else np.asarray(index)
    return np.atleast_1d(indices), indices.ndim == 0


def gather_frames(frames: np.ndarray, index: np.ndarray) -> np.ndarray:
    """`frames[index]`, copied by torch's `index_select`, which splits the copy over torch's threads.

    The copy is memory-bound (a batch of 32 windows of 5 Atari frames is 1.1 MB from random places),
    and numpy's fancy indexing uses one core; with two threads it takes about half the time. The
    result is a plain numpy array (it shares memory with the tensor torch allocated).
    """
    if not frames.flags.writeable or not frames.flags.c_contiguous:  # torch.from_numpy needs both
        return frames[index]
    flat = torch.from_numpy(np.ascontiguousarray(index, dtype=np.int64).reshape(-1))
    gathered = torch.index_select(torch.from_numpy(frames), 0, flat).numpy()
    return gathered.reshape(*index.shape, *frames.shape[1:])
