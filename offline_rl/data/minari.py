"""Load Minari datasets into a Tianshou ReplayBuffer.

Minari stores each episode's T + 1 observations, so every step has its true next observation and
nothing is dropped. Terminations and truncations are copied as they are.

Dict (and Tuple) observations are flattened to one float32 vector per step: Dict entries in sorted
key order, Tuple entries in order, depth first, each entry raveled. Gymnasium sorts the keys of a
Dict space built from a plain dict, so this is the order `gymnasium.spaces.flatten` uses for such
spaces, and an evaluation env wrapped in `FlattenObservation` sees the same layout.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from tianshou.data import ReplayBuffer

from offline_rl.core.errors import DatasetError, DownloadError, first_line
from offline_rl.core.progress import progress_bar
from offline_rl.data.download import unreachable
from offline_rl.data.hdf5_files import says_file_is_damaged
from offline_rl.data.transitions import make_replay_buffer, require_finite


def is_minari_directory(path: Path) -> bool:
    """Whether `path` is a Minari dataset directory (or its `data/` folder)."""
    return (path / "data" / "metadata.json").is_file() or (path / "metadata.json").is_file()


def open_minari(source: str | os.PathLike[str], *, download: bool = False) -> Any:
    """Open a Minari dataset from a local directory or by id (local first, then a download)."""
    import minari  # heavy (Minari): loaded only when used
    from minari.dataset.minari_dataset import MinariDataset  # heavy (Minari): loaded only when used

    path = Path(source).expanduser()
    if path.is_dir():
        if not is_minari_directory(path):
            raise DatasetError(f"{path}: not a Minari dataset directory (no metadata.json in it or in data/)")
        data_dir = path / "data" if (path / "data").is_dir() else path
        try:
            return MinariDataset(data_dir)
        except Exception as error:  # Minari raises bare ValueError/KeyError/AssertionError for bad metadata
            raise DatasetError(f"{data_dir}: unreadable Minari dataset ({first_line(error)})") from None
    dataset_id = str(source)
    here = dataset_path(dataset_id).exists()  # then Minari reads it, downloading nothing
    if download:
        _require_remote(dataset_id)
    try:
        return minari.load_dataset(dataset_id, download=download)
    except FileNotFoundError:
        raise DatasetError(
            f"Minari dataset '{dataset_id}' not found locally at {dataset_path(dataset_id)}; "
            f"{_local_near_miss(dataset_id)}pass download=True (--download) to fetch it, or give a dataset directory"
        ) from None
    except ImportError as error:
        raise DownloadError(
            f"Minari dataset '{dataset_id}' is not local and downloading it needs an optional package "
            f"({error}); pip install 'minari[hf]'"
        ) from None
    except Exception as error:  # the HTTP client's own errors (no network) are not OSErrors
        if download and not here:
            raise _download_error(dataset_id, error) from None
        # On disk, but Minari cannot open it: its bare ValueError/KeyError/AssertionError for bad metadata
        raise DatasetError(
            f"Minari dataset '{dataset_id}' at {dataset_path(dataset_id)}: unreadable ({first_line(error)})"
        ) from None


def dataset_path(dataset_id: str) -> Path:
    """Where Minari keeps `dataset_id`: under `$MINARI_DATASETS_PATH`, else `~/.minari/datasets`. Minari
    creates that root folder on every look-up, which fails with a bare OSError when the variable names a
    file or a folder this user cannot create."""
    from minari.storage.datasets_root_dir import get_dataset_path  # heavy (Minari): loaded only when used

    try:
        return get_dataset_path(dataset_id)
    except OSError as error:
        root = os.environ.get("MINARI_DATASETS_PATH") or "~/.minari/datasets"
        file = Path(root).expanduser().is_file()
        why = "a file, not a folder" if file else f"cannot be created ({error.strerror or error})"
        raise DatasetError(f"Minari datasets folder {root}: {why}; set MINARI_DATASETS_PATH to a folder") from None


def episodes_of(dataset: Any, desc: str) -> Iterator[Any]:
    """An opened dataset's episodes in order, with a progress bar. Minari reads each from its data file
    only here, so a damaged or truncated file shows first here: as one line naming the folder, not
    h5py's traceback."""
    episodes = iter(progress_bar(dataset.iterate_episodes(), total=dataset.total_episodes, desc=desc, leave=False))
    while True:
        try:
            episode = next(episodes)
        except StopIteration:
            return
        except Exception as error:
            if not says_file_is_damaged(error):
                raise
            raise DatasetError(
                f"Minari dataset '{dataset.spec.dataset_id}': its data in {dataset.storage.data_path} cannot be "
                f"read ({first_line(error)}); download or copy the dataset again"
            ) from None
        yield episode


def _local_near_miss(dataset_id: str) -> str:
    """`did you mean ... (here)? else ` for an id one typo away from a dataset already here: a misspelt
    id would otherwise send the user to download what they have."""

    import minari  # heavy (Minari): loaded only when used

    close = difflib.get_close_matches(dataset_id, list(minari.list_local_datasets()), n=1, cutoff=0.8)
    return f"did you mean '{close[0]}' (here)? else " if close else ""


MINARI_HOSTS = {"hf": "huggingface.co", "gcp": "storage.googleapis.com"}


def _require_remote(dataset_id: str) -> None:
    """Without a network, fail in seconds with one line instead of Minari's half minute of retries."""
    from minari.storage.remotes import DEFAULT_REMOTE  # heavy (Minari): loaded only when used

    if dataset_path(dataset_id).exists():
        return
    kind = os.environ.get("MINARI_REMOTE", DEFAULT_REMOTE).split("://", 1)[0]
    host = MINARI_HOSTS.get(kind)
    problem = unreachable(host) if host else None
    if problem:
        raise _download_error(dataset_id, ConnectionError(problem))


def _download_error(dataset_id: str, error: BaseException) -> DownloadError:
    reason = first_line(error)
    return DownloadError(
        f"Minari dataset '{dataset_id}' is not at {dataset_path(dataset_id)} and could not be "
        f"downloaded ({reason}); {_local_near_miss(dataset_id)}copy the dataset directory there (or set "
        "MINARI_DATASETS_PATH)"
    )


def load_minari(source: str | os.PathLike[str], download: bool = False) -> ReplayBuffer:
    """Load a Minari dataset id (e.g. `mujoco/halfcheetah/medium-v0`) or dataset directory."""
    dataset = open_minari(source, download=download)
    label = f"Minari dataset '{dataset.spec.dataset_id}'"
    total = int(dataset.total_steps)
    if total == 0:
        raise DatasetError(f"{label} holds no transitions")
    obs_space, act_space = dataset.observation_space, dataset.action_space
    obs_dtype, obs_shape = _observation_layout(obs_space, label)
    act_dtype, act_shape = _action_layout(act_space, label)
    obs = np.empty((total, *obs_shape), dtype=obs_dtype)
    obs_next = np.empty((total, *obs_shape), dtype=obs_dtype)
    columns = StepColumns.empty(total, act_dtype, act_shape)
    cursor = 0
    for episode in episodes_of(dataset, "load minari"):
        if len(episode.rewards) == 0:
            continue
        flat = _flatten(episode.observations, obs_space).astype(obs_dtype, copy=False)
        end = columns.add(cursor, episode, len(flat), label)
        obs[cursor:end] = flat[:-1]
        obs_next[cursor:end] = flat[1:]
        cursor = end
    act, rew, terminated, truncated = columns.act, columns.rew, columns.terminated, columns.truncated
    for key, array in (("observations", obs[:cursor]), ("actions", act[:cursor]), ("rewards", rew[:cursor])):
        require_finite(array, source=label, key=key)
    return make_replay_buffer(
        obs=obs[:cursor],
        act=act[:cursor],
        rew=rew[:cursor],
        terminated=terminated[:cursor],
        truncated=truncated[:cursor],
        obs_next=obs_next[:cursor],
        info=minari_info(dataset, source),
    )


@dataclasses.dataclass
class StepColumns:
    """The per-step arrays of a Minari dataset's episodes, filled episode by episode, with the ends as
    recorded: an episode stored unfinished ends truncated."""

    act: np.ndarray
    rew: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray

    @classmethod
    def empty(cls, total: int, act_dtype: np.dtype, act_shape: tuple[int, ...]) -> StepColumns:
        return cls(
            act=np.empty((total, *act_shape), dtype=act_dtype),
            rew=np.empty(total, dtype=np.float32),
            terminated=np.zeros(total, dtype=bool),
            truncated=np.zeros(total, dtype=bool),
        )

    def add(self, start: int, episode: Any, observations: int, label: str) -> int:
        """Write one episode's steps from `start`; returns where they end. `observations` is how many the
        episode holds: Minari stores T + 1 for T steps, so each step keeps its true next observation."""
        steps = len(episode.rewards)
        if observations != steps + 1:
            raise DatasetError(
                f"{label}: episode {episode.id} has {observations} observations for {steps} steps; expected steps + 1"
            )
        end = start + steps
        self.act[start:end] = np.asarray(episode.actions).reshape(steps, *self.act.shape[1:])
        self.rew[start:end] = np.asarray(episode.rewards, dtype=np.float32).reshape(steps)
        self.terminated[start:end] = np.asarray(episode.terminations, dtype=bool).reshape(steps)
        self.truncated[start:end] = np.asarray(episode.truncations, dtype=bool).reshape(steps)
        if not (self.terminated[end - 1] or self.truncated[end - 1]):
            self.truncated[end - 1] = True  # an episode stored unfinished: its end is a truncation
        return end


def minari_info(dataset: Any, source: str | os.PathLike[str]) -> dict[str, Any]:
    """The metadata a buffer loaded from an opened Minari dataset carries (`dataset_info`)."""
    metadata = dataset.storage.metadata
    return {
        "format": "minari",
        "source": str(source),
        "name": dataset.spec.dataset_id,
        "task": _env_id(dataset),
        "ref_min_score": _optional_float(metadata.get("ref_min_score")),
        "ref_max_score": _optional_float(metadata.get("ref_max_score")),
        # The env to evaluate on, as the dataset records it (keyword arguments included: a maze's
        # fixed goal, a task's settings), JSON as Minari stores it; read by `envs.env_spec_from_json`.
        "eval_env_spec": metadata.get("eval_env_spec") or metadata.get("env_spec"),
    }


def _env_id(dataset: Any) -> str | None:
    spec = dataset.env_spec
    return spec.id if spec is not None else None


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _flat_size(space: gym.Space) -> int:
    if isinstance(space, gym.spaces.Box):
        return int(np.prod(space.shape))
    if isinstance(space, gym.spaces.Dict):
        return sum(_flat_size(space[key]) for key in sorted(space.keys()))
    if isinstance(space, gym.spaces.Tuple):
        return sum(_flat_size(sub) for sub in space.spaces)
    raise DatasetError(f"unsupported observation space {space}; expected Box, or Dict/Tuple of Boxes")


def _observation_layout(space: gym.Space, label: str) -> tuple[np.dtype, tuple[int, ...]]:
    """Box observations keep their shape and integer dtype (images); Dict/Tuple become float32 vectors."""
    if isinstance(space, gym.spaces.Box):
        dtype = np.dtype(np.float32) if space.dtype.kind == "f" else space.dtype
        return dtype, tuple(space.shape)
    if isinstance(space, gym.spaces.Dict | gym.spaces.Tuple):
        try:
            return np.dtype(np.float32), (_flat_size(space),)
        except DatasetError as error:
            raise DatasetError(f"{label}: {error}") from None
    raise DatasetError(f"{label}: observation_space is {space}; expected Box, or Dict/Tuple of Boxes")


def _action_layout(space: gym.Space, label: str) -> tuple[np.dtype, tuple[int, ...]]:
    if isinstance(space, gym.spaces.Box):
        return np.dtype(np.float32), (int(np.prod(space.shape)),)
    if isinstance(space, gym.spaces.Discrete):
        return np.dtype(np.int64), ()
    raise DatasetError(f"{label}: action_space is {space}; expected Box or Discrete")


def _flatten(observations: Any, space: gym.Space) -> np.ndarray:
    """(T + 1, flat_dim) view of an episode's observations, in the documented order."""
    if isinstance(space, gym.spaces.Dict):
        return np.concatenate([_flatten_leaf(observations[key], space[key]) for key in sorted(space.keys())], axis=1)
    if isinstance(space, gym.spaces.Tuple):
        return np.concatenate([_flatten_leaf(observations[i], sub) for i, sub in enumerate(space.spaces)], axis=1)
    return np.asarray(observations)


def _flatten_leaf(observations: Any, space: gym.Space) -> np.ndarray:
    flat = _flatten(observations, space)
    return flat.reshape(len(flat), -1).astype(np.float32, copy=False)
