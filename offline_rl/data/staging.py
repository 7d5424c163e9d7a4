"""Read any Tianshou buffer exactly once, in Tianshou's order, to stage it where an algorithm samples.

Tianshou's own algorithms sample through `buffer.sample`, which knows each buffer kind's layout.
Algorithms that keep the data on their device instead must read the same transitions: only the
valid rows (a partially filled `VectorReplayBuffer` has empty slots between its sub-buffers), in
the order `buffer.sample_indices(0)` gives (each sub-buffer from its oldest transition to its
newest), with observations as `buffer[indices]` assembles them (frame stacks, `ignore_obs_next`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from tianshou.algorithm.algorithm_base import Algorithm
from tianshou.data import Batch, HERReplayBuffer, PrioritizedReplayBuffer, ReplayBuffer
from tianshou.data.buffer.manager import HERReplayBufferManager

from offline_rl.compat import buffer_columns
from offline_rl.errors import DatasetError

COLUMNS = ("obs", "act", "rew", "terminated", "obs_next")


class StoredTransitions(NamedTuple):
    """The columns of every stored transition, row k being buffer index `indices[k]`."""

    obs: np.ndarray
    act: np.ndarray
    rew: np.ndarray
    terminated: np.ndarray
    obs_next: np.ndarray
    episode_end: np.ndarray  # done, or the newest step of a (sub-)buffer whose episode still runs
    indices: np.ndarray


def stored_indices(buffer: ReplayBuffer) -> np.ndarray:
    """Buffer indices of every stored transition, in Tianshou's order (`sample_indices(0)`)."""
    return np.asarray(buffer.sample_indices(0), dtype=np.int64)


def _is_identity(indices: np.ndarray) -> bool:
    return len(indices) == 0 or (int(indices[0]) == 0 and bool(np.all(np.diff(indices) == 1)))


_PLAIN_GETITEM = (ReplayBuffer.__getitem__, PrioritizedReplayBuffer.__getitem__)


def _reads_raw_columns(buffer: ReplayBuffer) -> bool:
    """Whether `buffer[i]` returns its stored rows unchanged (no frame stacking, no rebuilt obs_next)."""
    options = getattr(buffer, "options", {})
    return (
        type(buffer).__getitem__ in _PLAIN_GETITEM
        and buffer.stack_num == 1
        and not options.get("ignore_obs_next", False)
        and not options.get("save_only_last_obs", False)
    )


def read_transitions(buffer: ReplayBuffer) -> StoredTransitions:
    """Every valid transition of `buffer` in Tianshou's order; a buffer whose slots are already in
    that order (a full or never-wrapped `ReplayBuffer`, what the loaders build) is sliced, not copied."""
    if isinstance(buffer, HERReplayBuffer | HERReplayBufferManager):
        raise DatasetError(
            "HER buffers relabel goals each time they are sampled, which a staged offline dataset cannot "
            "reproduce; relabel the data first and train from a plain ReplayBuffer"
        )
    indices = stored_indices(buffer)
    if len(indices) == 0:
        raise DatasetError("the replay buffer holds no transitions")
    if _reads_raw_columns(buffer):
        stored = buffer_columns(buffer)
        rows = slice(0, len(indices)) if _is_identity(indices) else indices  # a slice is a view
        columns = {key: np.asarray(stored[key][rows]) for key in COLUMNS}
    else:
        batch = buffer[indices]
        columns = {key: np.asarray(batch[key]) for key in COLUMNS}
    return StoredTransitions(**columns, episode_end=episode_ends(buffer, indices), indices=indices)


def episode_ends(buffer: ReplayBuffer, indices: np.ndarray) -> np.ndarray:
    """Whether each transition at `indices` is the last its episode has in the buffer: `done`, or the
    newest step of a (sub-)buffer whose episode still runs (no next step to follow it there)."""
    ends = np.asarray(buffer.done[indices], dtype=bool).copy()
    ends[np.isin(indices, buffer.unfinished_index())] = True
    return ends


def monte_carlo_returns(rewards: np.ndarray, episode_end: np.ndarray, gamma: float) -> np.ndarray:
    """Discounted return to the end of each transition's episode, Σ_k γ^k r_{t+k}, with rows in
    buffer order (episodes contiguous, `episode_end` on each one's last row); no bootstrap."""
    size = len(rewards)
    flags = Batch(
        rew=np.asarray(rewards, dtype=np.float64).reshape(size),
        terminated=np.asarray(episode_end, dtype=bool),
        truncated=np.zeros(size, dtype=bool),
    )
    # Tianshou's GAE with λ = 1 and all values 0 is exactly the return-to-go (a compiled loop).
    returns, _ = Algorithm.compute_episodic_return(
        flags,  # type: ignore[arg-type]
        _NO_UNFINISHED,  # type: ignore[arg-type]
        np.arange(size),
        gamma=gamma,
        gae_lambda=1.0,
    )
    return np.asarray(returns, dtype=np.float32)


class _NoUnfinishedEpisodes:
    """`compute_episodic_return` asks a buffer for its running episodes; `episode_end` already has them."""

    @staticmethod
    def unfinished_index() -> np.ndarray:
        return np.empty(0, dtype=np.int64)


_NO_UNFINISHED = _NoUnfinishedEpisodes()


def buffer_fingerprint(buffer: ReplayBuffer) -> tuple[int, int, int, bytes]:
    """Changes whenever transitions are added, the storage is replaced or another buffer is passed.
    (Values edited in place are not seen; `process_buffer` re-stages on every training run.)"""
    return (id(buffer), len(buffer), id(buffer_columns(buffer)), np.asarray(buffer.last_index).tobytes())


def is_prioritized(buffer: ReplayBuffer) -> bool:
    """A prioritized buffer: sample by its priorities, weight the loss, send back new priorities."""
    return isinstance(buffer, PrioritizedReplayBuffer)
