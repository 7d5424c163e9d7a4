"""Load D4RL-format HDF5 datasets into a Tianshou ReplayBuffer with exact episode ends.

D4RL marks an episode end two ways: `terminals` (the MDP ended: no bootstrap) and `timeouts` (a
time limit cut the episode: bootstrap from the next observation). Treating time-outs as terminals,
or taking `observations[i + 1]` as the next observation of an episode's last step, are the classic
silent bugs of offline RL; this loader does neither:

- `terminated = terminals`, `truncated = timeouts`, `done = terminated | truncated`;
- `obs_next` is `next_observations` when the file has it; otherwise `observations[i + 1]` inside an
  episode. A time-out step (and the file's last step) has no known next observation then, so it is
  dropped and its predecessor becomes a truncation. A terminal step keeps its own observation as a
  placeholder `obs_next`, which the zero bootstrap weight never reads. No step is ever bridged to
  the next episode's first observation.
- float64 arrays are read as float32 by HDF5 itself, chunk by chunk, so memory peaks at the size of
  the float32 arrays. Integer `actions` are a discrete task's action indices and load as int64 of
  shape (N,), as Minari's Discrete datasets do.
- D4RL's Ant datasets (`ant-*-v2`) were recorded on gym's Ant-v2, whose 111 observations are
  qpos[2:] and qvel (27) and 84 contact forces; under MuJoCo 2, mujoco-py never computed those
  forces, so they are zero throughout the files (D4RL issue #143), and the rewards carry no contact
  cost. That is gymnasium's Ant-v4 at its defaults (27 observations, no contact cost), so when the
  84 columns are all zero they are dropped: `--task Ant-v4` evaluates the D4RL Ant datasets as
  recorded. A network reading the zero columns would compute the same function (zero inputs add
  nothing), so scores stay comparable with implementations that keep them.
- Names cover every version D4RL publishes of its locomotion and AntMaze datasets: v2 (CORL's), v1,
  and v0 (the CQL paper's), of its Adroit hand datasets: v1 (CORL's) and v0 (the CQL paper's), and
  of its Maze2D datasets: v1 (CORL's), and of its Franka Kitchen datasets: v0, each read from its own
  file under D4RL's own file name. Versions are different recordings, so a near miss is told a name
  that exists rather than swapped for it. The Adroit datasets evaluate on `D4RL/<task>-v1`
  (`offline_rl.envs.adroit`: Gymnasium-Robotics' hands with D4RL's rewards), the Maze2D and AntMaze ones
  on `D4RL/<name>` (`offline_rl.envs.maze2d`, `offline_rl.envs.antmaze`: D4RL's envs rebuilt on the
  `mujoco` bindings); the Kitchen ones load, but their env is not available here.
- A file without `timeouts` (older D4RL files, many users' files) gets D4RL's own rule, as
  `d4rl.qlearning_dataset` applies it: a step that is the `max_episode_steps`-th since the last
  episode end is a time-out. The limit comes from the dataset's name, its recorded task, or the
  caller's task; with none of them, a `MissingTimeoutsWarning` says that episodes end at
  `terminals` only.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from tianshou.data import ReplayBuffer

from offline_rl.core.errors import DatasetError, DownloadError, OfflineRLWarning
from offline_rl.data.download import download_file
from offline_rl.data.hdf5_files import hdf5_for_reading, hdf5_layout
from offline_rl.data.transitions import (
    action_indices,
    make_replay_buffer,
    require_finite,
    require_flag_array,
)
from offline_rl.envs.d4rl_catalogue import (
    d4rl_episode_steps,
    d4rl_gymnasium_task,
    d4rl_name_of_file,
    d4rl_url,
    is_d4rl_name,
    locomotion_env,
)
from offline_rl.envs.make import episode_limit
from offline_rl.envs.scores import reference_scores

REQUIRED_KEYS = ("observations", "actions", "rewards", "terminals")
OPTIONAL_KEYS = ("timeouts", "next_observations")


_COMPACT_CHUNK = 1 << 16
ANT_STATE_DIMS = 27
"""qpos[2:] and qvel of MuJoCo's ant: the observation of gymnasium's Ant-v4 at its defaults; D4RL's
Ant files append 84 contact forces to it (zero throughout, see the module docstring)."""
ANT_V2_OBSERVATION_DIMS = 111


class MissingTimeoutsWarning(OfflineRLWarning):
    """A file without `timeouts` whose episode length is unknown: episodes end at `terminals` only."""


def timeouts_from_episode_limit(terminals: np.ndarray, max_episode_steps: int) -> np.ndarray:
    """D4RL's rule for files without `timeouts`: the step `max_episode_steps − 1` after an episode
    start (the first step, or the step after a terminal or an earlier time-out) is a time-out."""
    steps = np.arange(len(terminals))
    starts = np.maximum.accumulate(np.where(np.r_[True, np.asarray(terminals[:-1], dtype=bool)], steps, 0))
    return (steps - starts) % max_episode_steps == max_episode_steps - 1


def d4rl_dataset_dir() -> Path:
    """Where D4RL keeps datasets: `$D4RL_DATASET_DIR`, else `~/.d4rl/datasets` (D4RL's default)."""
    return Path(os.environ.get("D4RL_DATASET_DIR") or Path.home() / ".d4rl" / "datasets").expanduser()


def d4rl_path(name: str) -> Path:
    """Local path of a named dataset: D4RL's own file name, the basename of its download URL."""
    return d4rl_dataset_dir() / d4rl_url(name).rsplit("/", 1)[1]


def resolve_d4rl_source(source: str | os.PathLike[str], *, download: bool = True) -> tuple[Path, str | None]:
    """Map a path or a D4RL dataset name to a file on disk, downloading a named dataset if needed."""
    path = Path(source).expanduser()
    if path.exists():
        return path, d4rl_name_of_file(path)
    name = str(source)
    if not is_d4rl_name(name):
        if path.suffix or os.sep in name:
            raise DatasetError(f"{path}: no such file")
        d4rl_url(name)  # raises the "unknown name" error with the list of known names
    local = d4rl_path(name)
    if not local.exists():
        if not download:
            raise DownloadError(
                f"dataset '{name}' not found at {local}; pass download=True (--download) to fetch it from "
                f"{d4rl_url(name)}, or set D4RL_DATASET_DIR to where it is"
            )
        download_file(d4rl_url(name), local, hint="or set D4RL_DATASET_DIR")
    return local, name


def load_d4rl(
    source: str | os.PathLike[str], *, download: bool = True, max_episode_steps: int | None = None
) -> ReplayBuffer:
    """Load a D4RL-format HDF5 file, or a D4RL dataset by name, into a ReplayBuffer.

    The buffer's `dataset_info` (see `offline_rl.data.dataset_info`) records the format, source
    path, dataset name, the task it was collected on (for locally generated files), the gymnasium
    env a named D4RL dataset evaluates on (`gymnasium_task`) and D4RL's reference scores.
    `max_episode_steps` (the evaluation task's time limit) is the fallback for a file without
    `timeouts` whose name and metadata do not say its episode length.
    """
    path, name = resolve_d4rl_source(source, download=download)
    return read_d4rl_file(path, name=name, max_episode_steps=max_episode_steps)


def read_d4rl_file(path: Path, *, name: str | None = None, max_episode_steps: int | None = None) -> ReplayBuffer:
    """Read and validate one D4RL-format file (see the module docstring for the semantics)."""
    with hdf5_for_reading(path) as file:
        arrays, metadata = read_d4rl_arrays(file, path)
    task = metadata.get("task")
    label = name or (f"{task}-{metadata.get('policy', 'local')}" if task else path.stem)
    scores = reference_scores(name or task or label)
    info: dict[str, Any] = {
        "format": "d4rl",
        "source": str(path),
        "name": label,
        "task": task,
        "ref_min_score": scores[0] if scores else None,
        "ref_max_score": scores[1] if scores else None,
    }
    if gymnasium_task := d4rl_gymnasium_task(name):  # D4RL's files record no env; their name says which
        info["gymnasium_task"] = gymnasium_task
    _drop_zero_contact_forces(arrays, name, info)
    if "timeouts" in arrays:
        info["timeouts_from"] = "file"
    else:
        limit = d4rl_episode_steps(name or "") or _task_episode_steps(task) or max_episode_steps
        if limit:
            arrays["timeouts"] = timeouts_from_episode_limit(arrays["terminals"], int(limit))
            info["timeouts_from"] = f"time limit {int(limit)}"
        else:
            info["timeouts_from"] = "none"
            warnings.warn(
                f"{path}: no 'timeouts' key and no known episode length, so episode boundaries are taken "
                "from 'terminals' only (give the task, e.g. --task, to apply D4RL's time-limit rule)",
                MissingTimeoutsWarning,
                stacklevel=2,
            )
    return d4rl_arrays_to_buffer(arrays, path, info)


def _drop_zero_contact_forces(arrays: dict[str, np.ndarray], name: str | None, info: dict[str, Any]) -> None:
    """A D4RL Ant dataset's observations become Ant-v4's, when its contact forces are zero throughout."""
    if locomotion_env(name) != "ant" or arrays["observations"].shape[1:] != (ANT_V2_OBSERVATION_DIMS,):
        return
    keys = [key for key in ("observations", "next_observations") if key in arrays]
    if any(arrays[key][:, ANT_STATE_DIMS:].any() for key in keys):
        return  # recorded with contact forces: kept, and an env observing them is needed
    for key in keys:
        arrays[key] = np.ascontiguousarray(arrays[key][:, :ANT_STATE_DIMS])
    info["observations"] = (
        f"the first {ANT_STATE_DIMS} of {ANT_V2_OBSERVATION_DIMS} (Ant-v4's); the 84 contact forces "
        "after them are zero throughout D4RL's Ant files and were dropped"
    )


def _task_episode_steps(task: Any) -> int | None:
    """The time limit of a gymnasium task recorded in a file's metadata, if gymnasium knows it."""

    return episode_limit(str(task)) if task else None


def read_d4rl_arrays(
    file: h5py.File, path: Path, *, more_flags: tuple[str, ...] = ()
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The columns of a D4RL-format file, validated (row counts, shapes, dtypes, finite values), and
    the scalars under its `metadata/`. `more_flags` names other episode-end columns to read as flags
    (d3rlpy 1.x's `episode_terminals`)."""
    flag_keys = ("terminals", "timeouts", *more_flags)
    for key in REQUIRED_KEYS:
        if key not in file:
            raise DatasetError(
                f"{path}: missing key '{key}'; a D4RL file needs {', '.join(REQUIRED_KEYS)} "
                f"(and optionally {', '.join(OPTIONAL_KEYS)}){_another_format(path)}"
            )
    datasets: dict[str, h5py.Dataset] = {}
    for key in (*REQUIRED_KEYS, *OPTIONAL_KEYS, *more_flags):
        if key in file:
            if not isinstance(file[key], h5py.Dataset):
                raise DatasetError(f"{path}: key '{key}' is a group; expected an array")
            datasets[key] = file[key]
    size = datasets["observations"].shape[0] if datasets["observations"].ndim else 0
    if size == 0:
        raise DatasetError(f"{path}: key 'observations' is empty; expected at least one transition")
    for key, dataset in datasets.items():
        found = dataset.shape[0] if dataset.ndim else 0
        if found != size:
            raise DatasetError(f"{path}: key '{key}' has {found} rows; expected {size} (the length of 'observations')")
    _check_shapes(datasets, path, flag_keys)
    arrays = {key: _read_numeric(dataset, path, key, key in flag_keys) for key, dataset in datasets.items()}
    metadata = _read_metadata(file)
    return arrays, metadata


def _another_format(path: Path) -> str:
    """What a file given as D4RL's (to `converters/d4rl.py`) is when it is another format this package
    reads, so the error says how to use it rather than only what D4RL's format lacks."""
    try:
        with hdf5_for_reading(path) as file:
            kind = hdf5_layout(file)
    except DatasetError:
        return ""
    return {
        "tianshou": "; it is a Tianshou buffer already (load_buffer; the examples read it as it is)",
        "d3rlpy": "; it is a d3rlpy dataset file (load_d3rlpy; the examples read it as it is)",
    }.get(kind, "")


def _check_shapes(datasets: dict[str, h5py.Dataset], path: Path, flag_keys: tuple[str, ...]) -> None:
    obs_shape = datasets["observations"].shape
    if len(obs_shape) < 2:
        raise DatasetError(f"{path}: key 'observations' has shape {obs_shape}; expected (N, obs_dim)")
    if "next_observations" in datasets and datasets["next_observations"].shape != obs_shape:
        raise DatasetError(
            f"{path}: key 'next_observations' has shape {datasets['next_observations'].shape}; "
            f"expected {obs_shape} (the shape of 'observations')"
        )
    if datasets["actions"].ndim not in (1, 2):
        raise DatasetError(f"{path}: key 'actions' has shape {datasets['actions'].shape}; expected (N, act_dim)")
    for key in ("rewards", *flag_keys):
        if key in datasets:
            shape = datasets[key].shape
            if len(shape) > 2 or (len(shape) == 2 and shape[1] != 1):
                raise DatasetError(f"{path}: key '{key}' has shape {shape}; expected ({shape[0]},)")


def _read_numeric(dataset: h5py.Dataset, path: Path, key: str, is_flag: bool) -> np.ndarray:
    """Read one column; observations, actions and rewards come back as float32, flags as bool."""
    dtype = dataset.dtype
    if dtype.kind not in "biuf":
        raise DatasetError(f"{path}: key '{key}' has dtype {dtype}; expected numbers")
    if is_flag:
        return require_flag_array(dataset[()].reshape(-1), source=str(path), key=key)
    if key == "actions" and dtype.kind in "iu":
        return action_indices(dataset[()], source=str(path), key=key)
    if dtype == np.float32:
        out = np.empty(dataset.shape, dtype=np.float32)
        dataset.read_direct(out)
    else:
        out = dataset.astype(np.float32)[()]  # HDF5 converts while reading: no float64 copy
    if key in ("rewards",):
        out = out.reshape(-1)
    elif key == "actions" and out.ndim == 1:
        out = out.reshape(-1, 1)
    require_finite(out, source=str(path), key=key)
    return out


def _read_metadata(file: h5py.File) -> dict[str, Any]:
    """Scalars under `metadata/` (written by `offline_rl.runs.dataset_generation` and by D4RL itself)."""
    metadata: dict[str, Any] = {}
    group = file.get("metadata")
    if isinstance(group, h5py.Group):
        for key, value in group.items():
            if isinstance(value, h5py.Dataset) and value.shape == ():
                item = value[()]
                metadata[key] = item.decode() if isinstance(item, bytes) else item
    return metadata


def d4rl_arrays_to_buffer(arrays: dict[str, np.ndarray], path: Path, info: dict[str, Any]) -> ReplayBuffer:
    """The buffer of validated D4RL-format columns, by the rules of the module docstring."""
    obs = arrays["observations"]
    size = len(obs)
    terminals = arrays["terminals"]
    timeouts = arrays.get("timeouts", np.zeros(size, dtype=bool))
    truncated = timeouts.copy()
    if "next_observations" in arrays:
        return make_replay_buffer(
            obs=obs,
            act=arrays["actions"],
            rew=arrays["rewards"],
            terminated=terminals,
            truncated=truncated,
            obs_next=arrays["next_observations"],
            info={**info, "dropped_steps": 0},
        )
    # No next_observations: a time-out step and the last step have no known successor.
    is_last = np.zeros(size, dtype=bool)
    is_last[-1] = True
    drop = ~terminals & (timeouts | is_last)
    episode_end = terminals | timeouts
    before_drop = np.flatnonzero(drop[1:]) if size > 1 else np.empty(0, dtype=np.int64)
    before_drop = before_drop[~drop[before_drop] & ~episode_end[before_drop]]
    truncated[before_drop] = True  # the predecessor's successor is known: it ends the truncated episode
    obs_next = np.empty_like(obs)
    obs_next[:-1] = obs[1:]
    obs_next[terminals] = obs[terminals]  # placeholder, multiplied by (1 - terminated) = 0
    keep = np.flatnonzero(~drop)
    if len(keep) == 0:
        raise DatasetError(
            f"{path}: no transition has a known next observation (every step is a time-out and "
            "there is no 'next_observations' key)"
        )
    columns = {
        "obs": obs,
        "act": arrays["actions"],
        "rew": arrays["rewards"],
        "terminated": terminals,
        "truncated": truncated,
        "obs_next": obs_next,
    }
    if len(keep) < size:
        columns = {key: _compact_rows(value, keep) for key, value in columns.items()}
    return make_replay_buffer(**columns, info={**info, "dropped_steps": int(size - len(keep))})


def _compact_rows(array: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Move the kept rows to the front in place, in chunks, so no second full-size copy is made.

    Safe because `keep` is increasing, so `keep[k] >= k`: each chunk reads rows at or after the
    positions it overwrites, and later chunks read rows past everything written so far.
    """
    for start in range(0, len(keep), _COMPACT_CHUNK):
        rows = keep[start : start + _COMPACT_CHUNK]
        array[start : start + len(rows)] = array[rows]
    return array[: len(keep)]
