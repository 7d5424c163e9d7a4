"""A rolled-out dataset in memory and on disk: episodes buffered per env until they end, then written
contiguously as a D4RL HDF5 file (its keys plus `metadata/*` saying how it was made) or as a Minari
dataset folder, by Minari's own writer."""

from __future__ import annotations

import os
import secrets
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from offline_rl.core import VERSION
from offline_rl.core.files import atomic_hdf5
from offline_rl.core.resources import require_memory
from offline_rl.envs.scores import environment_key, reference_scores

if TYPE_CHECKING:
    pass


RANDOM_POLICY = "random"
"""The behaviour of D4RL's random recipe: uniform actions."""
OUTPUT_FORMATS = ("d4rl", "minari")


@dataclass(frozen=True)
class Provenance:
    """How a dataset was made, as its file records it."""

    task: str
    policy: str  # RANDOM_POLICY, or the absolute path of the policy file
    noise_std: float
    seed: int
    num_envs: int
    recipe: str | None = None  # one of D4RL's recipes (`offline_rl.runs.recipes`), where one made it


class EpisodeBuffer:
    """Growable storage for the steps of one environment's current episode."""

    def __init__(self, obs_shape: tuple[int, ...], act_shape: tuple[int, ...], act_dtype: type = np.float32) -> None:
        self.obs_shape, self.act_shape, self.act_dtype = obs_shape, act_shape, act_dtype
        self.length = 0
        self._allocate(1024)

    def _allocate(self, capacity: int) -> None:
        old = getattr(self, "columns", None)
        self.columns = {
            "observations": np.empty((capacity, *self.obs_shape), np.float32),
            "actions": np.empty((capacity, *self.act_shape), self.act_dtype),  # int64 indices when discrete
            "rewards": np.empty(capacity, np.float32),
            "terminals": np.empty(capacity, bool),
            "timeouts": np.empty(capacity, bool),
            "next_observations": np.empty((capacity, *self.obs_shape), np.float32),
        }
        if old is not None:
            for key, column in old.items():
                self.columns[key][: self.length] = column[: self.length]

    def add(
        self,
        obs: np.ndarray,
        act: np.ndarray,
        rew: float,
        terminal: bool,
        timeout: bool,
        next_obs: np.ndarray,
    ) -> None:
        if self.length == len(self.columns["rewards"]):
            self._allocate(2 * self.length)
        row = self.length
        self.columns["observations"][row] = obs
        self.columns["actions"][row] = act
        self.columns["rewards"][row] = rew
        self.columns["terminals"][row] = terminal
        self.columns["timeouts"][row] = timeout
        self.columns["next_observations"][row] = next_obs
        self.length += 1

    def clear(self) -> None:
        self.length = 0


class DatasetWriter:
    """Fixed-size output columns filled with whole episodes, in the order they finish."""

    def __init__(
        self,
        size: int,
        obs_shape: tuple[int, ...],
        act_shape: tuple[int, ...],
        act_dtype: type = np.float32,
        *,
        size_flag: str = "--size",
    ) -> None:
        """Columns for `size` transitions; a size the memory cannot hold is one line naming `size_flag`."""
        need = self.bytes_needed(size, obs_shape, act_shape, act_dtype)
        require_memory(need, f"{size_flag} {size}", f"lower {size_flag}")
        self.size = size
        self.cursor = 0
        self.columns = EpisodeBuffer(obs_shape, act_shape, act_dtype)
        self.columns._allocate(size)

    @staticmethod
    def bytes_needed(size: int, obs_shape: tuple[int, ...], act_shape: tuple[int, ...], act_dtype: type) -> int:
        """The memory of the columns a writer of `size` transitions holds: observations and next
        observations (float32), actions, rewards (float32), terminals and timeouts."""
        per_transition = 2 * 4 * int(np.prod(obs_shape)) + np.dtype(act_dtype).itemsize * int(np.prod(act_shape)) + 6
        return size * per_transition

    @property
    def full(self) -> bool:
        return self.cursor >= self.size

    # What a collection journal (`offline_rl.runs.collection_journal`) keeps: the finished episodes.
    # An episode still running when a session stops is not kept; the next session plays new ones.

    def __len__(self) -> int:
        return self.cursor

    def position(self) -> tuple[int]:
        return (self.cursor,)

    def rows_since(self, position: tuple[int]) -> dict[str, np.ndarray]:
        (start,) = position
        return {key: column[start : self.cursor] for key, column in self.columns.columns.items()}

    def extend(self, rows: dict[str, np.ndarray]) -> None:
        end = self.cursor + len(rows["rewards"])
        if end > self.size:
            raise ValueError(f"{end} steps kept, more than the {self.size} to collect")
        for key, column in self.columns.columns.items():
            column[self.cursor : end] = rows[key]
        self.cursor = end

    def close_running_episode(self) -> None:
        """Nothing to close: only finished episodes are written here."""

    def append(self, episode: EpisodeBuffer, *, data_ends_here: bool) -> None:
        """Copy an episode in; if it is cut (no room left, or still running), flag a time-out."""
        take = min(episode.length, self.size - self.cursor)
        if take <= 0:
            return
        end = self.cursor + take
        for key, column in self.columns.columns.items():
            column[self.cursor : end] = episode.columns[key][:take]
        cut = take < episode.length or data_ends_here
        if cut and not self.columns.columns["terminals"][end - 1]:
            self.columns.columns["timeouts"][end - 1] = True
        self.cursor = end


def write_hdf5_dataset(output: Path, writer: DatasetWriter, made: Provenance, compression: str | None) -> None:
    """The episodes as a D4RL HDF5 file, with `metadata/*` saying how they were made."""
    size = writer.cursor
    columns = {key: column[:size] for key, column in writer.columns.columns.items()}
    write_d4rl_columns(output, columns, made, compression)


def write_d4rl_columns(output: Path, columns: dict[str, np.ndarray], made: Provenance, compression: str | None) -> None:
    """D4RL's columns as its HDF5 file, atomically, with `metadata/*` saying how they were made."""
    with atomic_hdf5(output) as file:
        for key, column in columns.items():
            file.create_dataset(key, data=column, compression=compression)
        meta = file.create_group("metadata")
        meta["task"] = made.task
        meta["policy"] = made.policy
        meta["noise_std"] = float(made.noise_std)
        meta["seed"] = int(made.seed)
        meta["num_envs"] = int(made.num_envs)
        meta["generator"] = f"offline_rl {VERSION}"
        if made.recipe:
            meta["recipe"] = made.recipe


def write_minari_directory(
    output: Path, writer: DatasetWriter, made: Provenance, obs_space: gym.Space, act_space: gym.Space
) -> None:
    """Write the collected episodes as a Minari dataset directory, appearing at `output` when complete.

    Minari creates datasets under `$MINARI_DATASETS_PATH/<id>`, so the dataset is built under a
    private temporary root next to `output` and the finished directory is renamed into place. Dict
    observations (`obs_space`, the env's own), recorded flat, are written back as dicts, as Minari's
    own collector writes them: the dataset's env (`recover_environment`) then observes what it holds.
    """

    import minari  # heavy (Minari): loaded only when used
    from minari.data_collector import EpisodeBuffer  # heavy (Minari): loaded only when used

    size = writer.cursor
    columns = {key: column[:size] for key, column in writer.columns.columns.items()}
    ends = np.flatnonzero(columns["terminals"] | columns["timeouts"])
    starts = np.concatenate([[0], ends[:-1] + 1])
    episodes = []
    for index, (start, end) in enumerate(zip(starts, ends + 1, strict=True)):
        observations = np.concatenate([columns["observations"][start:end], columns["next_observations"][end - 1 : end]])
        episodes.append(
            EpisodeBuffer(
                id=index,
                observations=_unflattened(obs_space, observations),
                actions=columns["actions"][start:end],
                rewards=columns["rewards"][start:end],
                terminations=columns["terminals"][start:end],
                truncations=columns["timeouts"][start:end],
                infos={},
            )
        )
    kind = RANDOM_POLICY if made.policy == RANDOM_POLICY else "policy"
    dataset_id = f"local/{environment_key(made.task)}/{kind}-v0"
    output.parent.mkdir(parents=True, exist_ok=True)
    # Absolute: Minari sizes a dataset by joining its folder to paths that already contain it, which
    # doubles a relative folder (a traceback after the whole collection, with --output relative).
    # Named before the `try`, made inside it: a stop landing just after it appeared must not leave it.
    staging = (output.parent / f".{output.name}.{secrets.token_hex(8)}.part").resolve()
    previous_root = os.environ.get("MINARI_DATASETS_PATH")
    try:
        staging.mkdir(mode=0o700)
        os.environ["MINARI_DATASETS_PATH"] = str(staging)
        with warnings.catch_warnings():
            # Minari nags about author/e-mail/permalink fields a local dataset has no use for.
            warnings.simplefilter("ignore", UserWarning)
            _create_minari_dataset(minari, dataset_id, episodes, made, obs_space, act_space, kind)
        if output.exists():
            shutil.rmtree(output)
        os.replace(staging / dataset_id, output)
    finally:
        if previous_root is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = previous_root
        shutil.rmtree(staging, ignore_errors=True)


def _unflattened(space: gym.Space, rows: np.ndarray) -> Any:
    """Rows of flattened observations back in `space`'s structure, a column per entry (dicts of
    stacked arrays, as Minari stores them), in `gymnasium.spaces.flatten`'s order; a Box's rows as
    they are."""
    if isinstance(space, gym.spaces.Box):
        return rows.reshape(len(rows), *space.shape).astype(space.dtype, copy=False)
    entries = list(space.spaces.items()) if isinstance(space, gym.spaces.Dict) else list(enumerate(space.spaces))
    columns, offset = {}, 0
    for key, entry in entries:
        width = gym.spaces.flatdim(entry)
        columns[key] = _unflattened(entry, rows[:, offset : offset + width])
        offset += width
    return columns if isinstance(space, gym.spaces.Dict) else tuple(columns.values())


def _create_minari_dataset(minari, dataset_id, episodes, made, obs_space, act_space, kind) -> None:
    scores = reference_scores(made.task)
    minari.create_dataset_from_buffers(
        dataset_id,
        episodes,
        env=made.task,
        algorithm_name=f"offline_rl.collect ({kind}, noise_std={made.noise_std}, seed={made.seed})",
        observation_space=obs_space,
        action_space=act_space,
        ref_min_score=scores[0] if scores else None,
        ref_max_score=scores[1] if scores else None,
        description=f"Generated locally by offline_rl {VERSION} from {made.policy}",
    )
