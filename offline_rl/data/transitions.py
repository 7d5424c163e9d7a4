"""Turn validated transition arrays into a Tianshou ReplayBuffer that knows its episode ends.

Every loader in this package funnels through `make_replay_buffer`, so the invariants that matter for
offline RL are enforced in one place:
- `done = terminated | truncated`, and only `terminated` stops bootstrapping;
- the buffer's last transition is always an episode end, so Tianshou's `buffer.next()` and n-step
  returns never wrap around into the first episode;
- arrays are shared with the buffer, not copied (a 1M-step dataset is loaded once).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tianshou.data import Batch, ReplayBuffer

from offline_rl.core.compat import mark_buffer_full, set_buffer_attribute
from offline_rl.core.errors import DatasetError
from offline_rl.data.names import combined_label

DATASET_INFO_ATTR = "dataset_info"
"""Name of the buffer attribute holding the dataset's metadata (a dict saved with the buffer)."""
SOURCE_SIZES_ATTR = "source_sizes"
"""Name of the attribute of a buffer loaded from several files: their transition counts, in index order."""


def make_replay_buffer(
    *,
    obs: np.ndarray,
    act: np.ndarray,
    rew: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    obs_next: np.ndarray,
    info: dict[str, Any] | None = None,
) -> ReplayBuffer:
    """Wrap full-length arrays in a ReplayBuffer without copying them.

    The buffer is marked full (its insertion index wrapped to 0 and `last_index` on the final
    transition), which is the state Tianshou's own buffer reaches after exactly `size` adds.
    """
    size = len(obs)
    if size == 0:
        raise DatasetError("dataset holds no transitions")
    terminated = np.asarray(terminated, dtype=bool)
    truncated = np.asarray(truncated, dtype=bool)
    if not (terminated[-1] or truncated[-1]):
        truncated = truncated.copy()
        truncated[-1] = True  # the data stops here: an unknown continuation is a truncation
    buffer = ReplayBuffer(size)
    batch = Batch(
        obs=obs,
        act=act,
        rew=np.asarray(rew, dtype=np.float32).reshape(size),
        terminated=terminated,
        truncated=truncated,
        done=terminated | truncated,
        obs_next=obs_next,
    )
    buffer.set_batch(batch)  # type: ignore[arg-type]
    mark_buffer_full(buffer, size)
    # Datasets hold what was sent to the environment (see `offline_rl.data.action_units`).
    set_dataset_info(buffer, {"action_units": "env", **(info or {})})
    return buffer


def set_dataset_info(buffer: ReplayBuffer, info: dict[str, Any]) -> None:
    """Attach metadata (name, source, reference scores...) that `save_hdf5` keeps with the buffer."""
    set_buffer_attribute(buffer, DATASET_INFO_ATTR, dict(info))


def combined_info(infos: list[dict[str, Any]]) -> dict[str, Any]:
    """The metadata of several files loaded as one buffer: one label for their names (`combined_label`),
    and whatever else they all agree on (the task they were recorded on, their source), so a buffer of
    several shards of one game still says which game."""
    if len(infos) == 1:
        return dict(infos[0])
    shared = {key: value for key, value in infos[0].items() if all(info.get(key) == value for info in infos[1:])}
    return {**shared, "name": combined_label([str(info.get("name", "?")) for info in infos])}


def set_source_sizes(buffer: ReplayBuffer, sizes: list[int]) -> None:
    """Record that `buffer` holds several files' transitions, `sizes[i]` of the i-th, one after another."""
    if sum(sizes) != len(buffer):
        raise ValueError(f"the files' {sum(sizes)} transitions are not the buffer's {len(buffer)}")
    set_buffer_attribute(buffer, SOURCE_SIZES_ATTR, np.asarray(sizes, dtype=np.int64))


def source_sizes(buffer: ReplayBuffer) -> np.ndarray | None:
    """The transition counts of the files a buffer was loaded from (`load_buffers`), in index order;
    None for a buffer from one file."""
    return buffer.__dict__.get(SOURCE_SIZES_ATTR)


def source_of_index(buffer: ReplayBuffer, indices: np.ndarray) -> np.ndarray | None:
    """Which of its files each buffer index comes from (0, 1, ...), or None for a buffer from one
    file. Batches can then be drawn a file at a time, as batch_rl draws each from one DQN Replay
    checkpoint."""
    sizes = source_sizes(buffer)
    if sizes is None:
        return None
    return np.searchsorted(np.cumsum(sizes), np.asarray(indices), side="right")


def dataset_info(buffer: ReplayBuffer) -> dict[str, Any]:
    """The metadata a loader attached to `buffer`, or an empty dict for a foreign buffer."""
    value = buffer.__dict__.get(DATASET_INFO_ATTR)
    if not isinstance(value, dict):
        return {}
    # HDF5 attributes come back as numpy scalars: give callers plain Python numbers.
    return {key: item.item() if isinstance(item, np.generic) else item for key, item in value.items()}


def has_discrete_actions(buffer: ReplayBuffer) -> bool:
    """Whether the buffer's actions are action indices (integers), as every loader stores a discrete
    task's (Minari's Discrete datasets, D4RL-format files with integer actions, Tianshou's own), rather
    than a continuous task's vectors: the one thing that says which of the two CQLs can learn from it."""
    return bool(np.issubdtype(np.asarray(buffer.act[:1]).dtype, np.integer))


def action_indices(values: np.ndarray, *, source: str, key: str) -> np.ndarray:
    """Integer actions are a discrete task's action indices (CartPole's, an Atari game's): int64 of
    shape (N,), as Minari's Discrete datasets load, for discrete CQL to index its Q-values with. Float
    actions, even whole-valued ones, stay a continuous task's and never come here."""
    if values.reshape(len(values), -1).shape[1] != 1:
        raise DatasetError(
            f"{source}: key '{key}' holds integers of shape {values.shape}; expected one action index per step, (N,)"
        )
    indices = values.reshape(-1).astype(np.int64, copy=False)
    require_no_negative_actions(indices, source=source, key=key)
    return indices


def require_no_negative_actions(actions: np.ndarray, *, source: str, key: str) -> None:
    """Refuse a negative integer action: as an index it would silently pick the last Q-value."""
    if actions.dtype.kind == "i" and actions.size and actions.min() < 0:
        raise DatasetError(f"{source}: key '{key}' holds the integer {actions.min()}; expected action indices >= 0")


def require_finite(array: np.ndarray, *, source: str, key: str) -> None:
    """Refuse NaN or inf values, which would silently poison every gradient step."""
    if array.dtype.kind != "f":
        return
    finite = np.isfinite(array)
    if not finite.all():
        bad = int(np.argwhere(~finite.reshape(len(array), -1).all(axis=1))[0, 0])
        count = int((~finite).sum())
        raise DatasetError(
            f"{source}: key '{key}' has {count} NaN/inf value(s) (first at index {bad}); expected finite numbers"
        )


def require_flag_array(array: np.ndarray, *, source: str, key: str) -> np.ndarray:
    """Read a terminal/time-out column (bool, 0/1 integers or 0.0/1.0 floats) as bool."""
    if array.dtype == bool:
        return array
    if array.dtype.kind not in "iuf":
        raise DatasetError(f"{source}: key '{key}' has dtype {array.dtype}; expected bool or 0/1 numbers")
    flags = array != 0
    if not np.isin(array, (0, 1)).all():
        raise DatasetError(f"{source}: key '{key}' holds values other than 0 and 1; expected episode-end flags")
    return flags


class TransitionRecorder:
    """The transitions one env plays, in order, for a plain (vector-observation) ReplayBuffer.

    Recorders of parallel envs are joined with `join_recordings`, env after env, so every episode
    stays contiguous; each env's last transition is closed as truncated, because its data stops there.
    """

    def __init__(self) -> None:
        self._rows: dict[str, list[Any]] = {key: [] for key in _RECORDED}

    def add(self, obs: Any, act: Any, rew: float, terminated: bool, truncated: bool, obs_next: Any) -> None:
        # Copies: collectors overwrite their observation arrays in place on the next step.
        for key, value in zip(_RECORDED, (obs, act, rew, terminated, truncated, obs_next), strict=True):
            self._rows[key].append(np.array(value))

    def __len__(self) -> int:
        return len(self._rows["act"])

    # What a collection journal (`offline_rl.runs.collection_journal`) keeps on disk and reads back.

    def position(self) -> tuple[int]:
        return (len(self),)

    def rows_since(self, position: tuple[int]) -> dict[str, np.ndarray]:
        (start,) = position
        return {key: np.asarray(rows[start:]) for key, rows in self._rows.items()}

    def extend(self, rows: dict[str, np.ndarray]) -> None:
        for key in _RECORDED:
            self._rows[key] += list(rows[key])

    def close_running_episode(self) -> None:
        """End the episode being recorded here, as truncated: its env will not continue it."""
        if len(self) and not (self._rows["terminated"][-1] or self._rows["truncated"][-1]):
            self._rows["truncated"][-1] = np.array(True)

    def arrays(self) -> dict[str, np.ndarray]:
        arrays = {key: np.asarray(rows) for key, rows in self._rows.items()}
        if len(self) and not (arrays["terminated"][-1] or arrays["truncated"][-1]):
            arrays["truncated"][-1] = True
        return arrays


_RECORDED = ("obs", "act", "rew", "terminated", "truncated", "obs_next")


def join_recordings(recorders: list[TransitionRecorder], info: dict[str, Any] | None = None) -> ReplayBuffer:
    """One ReplayBuffer of several envs' recordings, episodes intact."""
    parts = [recorder.arrays() for recorder in recorders if len(recorder)]
    if not parts:
        raise DatasetError("no transitions were recorded")
    joined = {key: np.concatenate([part[key] for part in parts]) for key in _RECORDED}
    return make_replay_buffer(**joined, info=info)
