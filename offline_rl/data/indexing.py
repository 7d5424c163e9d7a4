"""Index normalisation shared by the buffers that rebuild observations at sample time."""

from __future__ import annotations

from typing import Any

import numpy as np


def as_indices(index: Any, size: int) -> tuple[np.ndarray, bool]:
    """(1-D index array, whether `index` was a scalar) for anything `ReplayBuffer.__getitem__` accepts.

    A 1-D integer array — what sampling passes — goes through untouched, so the hot path costs nothing.
    """
    if isinstance(index, np.ndarray) and index.ndim == 1:
        return index, False
    indices = np.arange(size)[index] if isinstance(index, slice) else np.asarray(index)
    return np.atleast_1d(indices), indices.ndim == 0
