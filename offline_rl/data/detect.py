"""Load any supported dataset, recognising its format by content rather than by file extension."""

from __future__ import annotations

import os
import re
from pathlib import Path

import h5py
from tianshou.data import ReplayBuffer

from offline_rl.core.errors import DatasetError
from offline_rl.data.buffers import load_buffer
from offline_rl.data.d3rlpy import load_d3rlpy
from offline_rl.data.d4rl import load_d4rl
from offline_rl.data.hdf5_files import hdf5_for_reading, hdf5_layout
from offline_rl.data.minari import is_minari_directory, load_minari
from offline_rl.envs.d4rl_catalogue import closest_d4rl_name, d4rl_name_of_tfds, is_d4rl_name

_MINARI_ID = re.compile(r"[\w.-]+(/[\w.-]+)*-v\d+")


def detect_format(source: str | os.PathLike[str]) -> str:
    """One of `d4rl`, `minari`, `tianshou`, `d3rlpy`: what `load_dataset` would read `source` as."""
    path = Path(source).expanduser()
    if path.is_dir():
        if is_minari_directory(path):
            return "minari"
        raise DatasetError(f"{path}: a directory that is not a Minari dataset (no metadata.json)")
    if path.is_file():
        if not h5py.is_hdf5(path):
            raise DatasetError(
                f"{path}: not an HDF5 file; expected a D4RL file, a Tianshou buffer, a d3rlpy dataset file or a "
                "Minari directory"
            )
        with hdf5_for_reading(path) as file:
            layout = hdf5_layout(file)
        if layout is not None:
            return layout
        raise DatasetError(
            f"{path}: HDF5 file with neither D4RL keys (observations, actions, rewards, terminals), "
            "a Tianshou buffer layout (_meta) nor a d3rlpy dataset's (columns, num_episodes)"
        )
    name = str(source)
    if is_d4rl_name(name):
        return "d4rl"
    if _MINARI_ID.fullmatch(name) and not path.suffix.startswith(".h") and not d4rl_name_of_tfds(name):
        return "minari"
    raise DatasetError(
        f"{name}: no such file or directory, and not a D4RL dataset name (e.g. halfcheetah-medium-v2) "
        f"or a Minari dataset id (e.g. mujoco/halfcheetah/medium-v0){_d4rl_hint(name)}"
    )


def _d4rl_hint(name: str) -> str:
    """`; did you mean D4RL's ...?` for a near miss of a D4RL name, the D4RL name of a TFDS copy of one,
    else nothing."""
    closest = closest_d4rl_name(name)
    if closest and d4rl_name_of_tfds(name):
        return f"; {name} is TFDS's copy of D4RL's {closest}: give {closest}, which reads D4RL's own file"
    return f"; did you mean D4RL's {closest}?" if closest else ""


def load_dataset(
    source: str | os.PathLike[str], *, download: bool = False, max_episode_steps: int | None = None
) -> ReplayBuffer:
    """Load a D4RL file or name, a Minari id or directory, a Tianshou HDF5 buffer or a d3rlpy dataset file.

    `download` allows fetching a named D4RL or Minari dataset that is not on disk;
    `max_episode_steps` (the task's time limit) places the time-outs of a D4RL file that has none.
    """
    kind = detect_format(source)
    if kind == "tianshou":
        return load_buffer(source)
    if kind == "minari":
        try:
            return load_minari(source, download=download)
        except DatasetError as error:  # `hopper-medium-v0` reads as a Minari id, but was meant as D4RL's
            hint = _d4rl_hint(str(source)) if not Path(source).expanduser().is_dir() else ""
            if not hint:
                raise
            raise type(error)(f"{error}{hint}") from None
    if kind == "d3rlpy":
        return load_d3rlpy(source)
    return load_d4rl(source, download=download, max_episode_steps=max_episode_steps)
