"""Load d3rlpy's dataset files into a Tianshou ReplayBuffer, without d3rlpy installed.

A d3rlpy user's data lives in the HDF5 files that `MDPDataset.dump` and `ReplayBuffer.dump` write
(after `algo.collect(env, buffer)`, or from arrays), so moving to this toolkit should not mean
re-collecting. Two layouts exist:

- **format 2.1** (d3rlpy 2.x): per episode i, `observations_i` (or, for tuple observations,
  `observations_i_j` for each part j), `actions_i`, `rewards_i` (T, 1) and one `terminated_i` flag;
  `columns`, `num_episodes` and `version` describe the file. d3rlpy reads an episode of T steps as T
  transitions when it terminated, the last one with no next observation, and as T − 1 otherwise: the
  last step of an unfinished (time-out) episode has no recorded successor. This loader does the same:
  that step is dropped and its predecessor becomes the episode's truncated end, and a terminal step
  keeps its own observation as the placeholder `obs_next` that the zero bootstrap weight never reads.
- **format 1.x** (d3rlpy 1.x): D4RL's flat columns plus `episode_terminals` (every episode end) and
  `discrete_action`. An episode end that is not a terminal is a time-out, as d3rlpy 2.x's own
  `load_v1` reads it, so the file is read by the D4RL rules with those time-outs.

Tuple observations are flattened in order, as the Minari loader and gymnasium's `FlattenObservation`
order a Tuple space. Integer actions are a discrete task's action indices (int64, shape (N,)), for
`atari_cql.py`; float actions a continuous task's. Image observations are refused: d3rlpy stacks
their frames while sampling, which a flat buffer of single frames cannot reproduce. d3rlpy records no
env id, so the run's `--task` names it; a file named after a D4RL dataset (`hopper-medium-v2.h5`, as
d3rlpy's `get_d4rl` users save theirs) takes that dataset's env and reference scores.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from tianshou.data import ReplayBuffer

from offline_rl.core.errors import DatasetError
from offline_rl.core.progress import progress_bar
from offline_rl.data.d4rl import d4rl_arrays_to_buffer, read_d4rl_arrays
from offline_rl.data.hdf5_files import d3rlpy_layout, hdf5_for_reading
from offline_rl.data.transitions import action_indices, make_replay_buffer, require_finite
from offline_rl.envs.d4rl_catalogue import d4rl_gymnasium_task
from offline_rl.envs.scores import reference_scores

EPISODE_COLUMNS = ("observations", "actions", "rewards", "terminated")
"""The columns of d3rlpy's standard `Episode`, each stored once per episode in format 2.1."""


def load_d3rlpy(source: str | os.PathLike[str]) -> ReplayBuffer:
    """Load one d3rlpy dataset file (either layout; see the module docstring)."""
    path = Path(source).expanduser()
    with hdf5_for_reading(path) as file:
        layout = d3rlpy_layout(file)
        if layout == "1.x":
            return _read_flat(file, path)
        if layout == "2.1":
            return _read_episodes(file, path)
    raise DatasetError(f"{path}: not a d3rlpy dataset file (no 'columns' or 'episode_terminals' key)")


def _info(path: Path, version: str, dropped_steps: int) -> dict[str, Any]:
    """Metadata: d3rlpy stores no env, so only a D4RL dataset's name in the file name says one."""
    scores = reference_scores(path.stem)
    info: dict[str, Any] = {
        "format": "d3rlpy",
        "d3rlpy_format": version,
        "source": str(path),
        "name": path.stem,
        "task": None,
        "ref_min_score": scores[0] if scores else None,
        "ref_max_score": scores[1] if scores else None,
        "dropped_steps": dropped_steps,
    }
    if gymnasium_task := d4rl_gymnasium_task(path.stem):
        info["gymnasium_task"] = gymnasium_task
    return info


def _read_flat(file: h5py.File, path: Path) -> ReplayBuffer:
    arrays, _ = read_d4rl_arrays(file, path, more_flags=("episode_terminals",))
    episode_ends = arrays.pop("episode_terminals")
    arrays["timeouts"] = episode_ends & ~arrays["terminals"]
    if _flag(file, path, "discrete_action", optional=True) and arrays["actions"].dtype.kind == "f":
        arrays["actions"] = _whole_indices(arrays["actions"], path)
    return d4rl_arrays_to_buffer(arrays, path, _info(path, "1.x", 0))


def _read_episodes(file: h5py.File, path: Path) -> ReplayBuffer:
    version = _text(file.get("version"))
    columns = [_text(item) for item in np.atleast_1d(_scalar(file, "columns", path))]
    missing = [column for column in EPISODE_COLUMNS if column not in columns]
    if missing or "num_episodes" not in file:
        what = f"columns {columns}" if missing else "no 'num_episodes' key"
        raise DatasetError(
            f"{path}: a d3rlpy file of format {version or '?'} with {what}; expected format 2.1 (current d3rlpy's "
            f"dump) of standard episodes ({', '.join(EPISODE_COLUMNS)})"
        )
    count = int(_scalar(file, "num_episodes", path))
    episodes = [_episode(file, path, index) for index in range(count)]
    kept = [max(0, steps if terminated else steps - 1) for steps, terminated, _ in episodes]
    total = sum(kept)
    if total == 0:
        raise DatasetError(
            f"{path}: no transition has a known next observation (no episode terminated or ran past one step)"
        )
    width = sum(int(np.prod(_open(file, path, key).shape[1:])) for key in _observation_keys(0, episodes[0][2]))
    first_act = _open(file, path, "actions_0")
    discrete = first_act.dtype.kind in "iu"
    obs = np.empty((total, width), dtype=np.float32)
    obs_next = np.empty_like(obs)
    act = np.empty(
        (total,) if discrete else (total, int(np.prod(first_act.shape[1:]))), dtype=np.int64 if discrete else np.float32
    )
    rew = np.empty(total, dtype=np.float32)
    terminated = np.zeros(total, dtype=bool)
    truncated = np.zeros(total, dtype=bool)
    cursor = 0
    for index in progress_bar(range(count), total=count, desc="load d3rlpy", leave=False):
        steps, ended, parts = episodes[index]
        rows = kept[index]
        if rows == 0:
            continue
        observations = _observation(file, path, index, steps, parts)
        if observations.shape[1:] != obs.shape[1:]:
            raise DatasetError(
                f"{path}: episode {index}'s observations have {observations.shape[1]} numbers a step; "
                f"expected {obs.shape[1]}, as in episode 0"
            )
        end = cursor + rows
        obs[cursor:end] = observations[:rows]
        obs_next[cursor : end - 1] = observations[1:rows]
        # A terminal step's successor is never read (zero bootstrap weight): its own observation stands in.
        obs_next[end - 1] = observations[rows] if rows < steps else observations[rows - 1]
        act[cursor:end] = _actions(file, path, index, steps, discrete, act.shape[1:])[:rows]
        rew[cursor:end] = _column(file, path, f"rewards_{index}", steps).reshape(steps)[:rows]
        terminated[end - 1] = ended
        truncated[end - 1] = not ended
        cursor = end
    for key, array in (("observations", obs), ("actions", act), ("rewards", rew)):
        require_finite(array, source=str(path), key=key)
    return make_replay_buffer(
        obs=obs,
        act=act,
        rew=rew,
        terminated=terminated,
        truncated=truncated,
        obs_next=obs_next,
        info=_info(path, version or "2.1", sum(steps for steps, _, _ in episodes) - total),
    )


def _episode(file: h5py.File, path: Path, index: int) -> tuple[int, bool, int]:
    """(steps, terminated, observation parts: 0 for one array) of episode `index`, read without its data."""
    actions = _open(file, path, f"actions_{index}")
    steps = actions.shape[0] if actions.shape else 0
    parts = 0
    if not _has(file, f"observations_{index}"):
        while _has(file, f"observations_{index}_{parts}"):
            parts += 1
        if parts == 0:
            raise DatasetError(f"{path}: missing key 'observations_{index}'; d3rlpy writes one per episode")
    return steps, _flag(file, path, f"terminated_{index}"), parts


def _observation_keys(index: int, parts: int) -> list[str]:
    """Where episode `index`'s observations are: one array, or a tuple's `parts` arrays."""
    return [f"observations_{index}"] if parts == 0 else [f"observations_{index}_{part}" for part in range(parts)]


def _observation(file: h5py.File, path: Path, index: int, steps: int, parts: int) -> np.ndarray:
    """Episode `index`'s observations as (T, numbers a step) float32; a tuple's parts side by side."""
    keys = _observation_keys(index, parts)
    arrays = [_column(file, path, key, steps) for key in keys]
    for key, array in zip(keys, arrays, strict=True):
        if array.ndim > 2:
            raise DatasetError(
                f"{path}: key '{key}' holds images of shape {array.shape[1:]}; d3rlpy stacks image frames "
                "while sampling, which is not read here: vector observations are (Atari data: "
                "converters/rl_unplugged_atari.py or atari_qrdqn.py --watch --save-buffer-name)"
            )
    return np.concatenate([array.reshape(steps, -1).astype(np.float32, copy=False) for array in arrays], axis=1)


def _actions(file: h5py.File, path: Path, index: int, steps: int, discrete: bool, shape: tuple[int, ...]) -> np.ndarray:
    key = f"actions_{index}"
    actions = _column(file, path, key, steps)
    if discrete != (actions.dtype.kind in "iu"):
        raise DatasetError(
            f"{path}: key '{key}' has dtype {actions.dtype}; expected "
            f"{'integers' if discrete else 'floats'}, as in episode 0"
        )
    if not discrete:
        return actions.reshape(steps, *shape).astype(np.float32, copy=False)
    return action_indices(actions, source=str(path), key=key)


def _has(file: h5py.File, key: str) -> bool:
    return bool(file.id.links.exists(key.encode()))


def _open(file: h5py.File, path: Path, key: str) -> h5py.h5d.DatasetID:
    """One of the file's arrays, opened through h5py's low-level API: a d3rlpy file holds several arrays
    per episode, and this costs about half of `file[key]`, which a file of many short episodes notices."""
    if not _has(file, key):
        raise DatasetError(f"{path}: missing key '{key}'; d3rlpy writes one per episode")
    try:
        return h5py.h5d.open(file.id, key.encode())
    except (KeyError, ValueError):
        raise DatasetError(f"{path}: key '{key}' is a group; expected an array") from None


def _read(dataset: h5py.h5d.DatasetID, path: Path, key: str) -> np.ndarray:
    if dataset.dtype.kind not in "biuf":
        raise DatasetError(f"{path}: key '{key}' has dtype {dataset.dtype}; expected numbers")
    array = np.empty(dataset.shape, dtype=dataset.dtype)
    if array.size:
        dataset.read(h5py.h5s.ALL, h5py.h5s.ALL, array)
    return array


def _column(file: h5py.File, path: Path, key: str, steps: int) -> np.ndarray:
    array = _read(_open(file, path, key), path, key)
    if array.ndim == 0 or array.shape[0] != steps:
        raise DatasetError(
            f"{path}: key '{key}' has shape {array.shape}; expected {steps} rows (the episode's actions)"
        )
    return array


def _flag(file: h5py.File, path: Path, key: str, *, optional: bool = False) -> bool:
    if optional and not _has(file, key):
        return False
    flag = _read(_open(file, path, key), path, key)
    if flag.shape != ():
        raise DatasetError(f"{path}: key '{key}' has shape {flag.shape}; expected one flag, ()")
    return bool(flag)


def _scalar(file: h5py.File, key: str, path: Path) -> Any:
    item = file.get(key)
    if not isinstance(item, h5py.Dataset):
        raise DatasetError(f"{path}: key '{key}' is missing or a group; expected d3rlpy's {key}")
    return item[()]


def _text(value: Any) -> str:
    if isinstance(value, h5py.Dataset):
        value = value[()]
    # errors="replace": the text names a version or a column in messages; damaged bytes must not stop that
    return value.decode(errors="replace") if isinstance(value, bytes) else ("" if value is None else str(value))


def _whole_indices(actions: np.ndarray, path: Path) -> np.ndarray:
    """d3rlpy 1.x's discrete actions stored as floats: action indices when every one is a whole number."""
    if not np.array_equal(actions, np.round(actions)):
        raise DatasetError(
            f"{path}: key 'actions' of a discrete-action file (discrete_action) holds fractions; expected indices"
        )
    return action_indices(actions.astype(np.int64), source=str(path), key="actions")
