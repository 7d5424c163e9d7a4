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
  (`offline_rl.d4rl_adroit`: Gymnasium-Robotics' hands with D4RL's rewards), the Maze2D and AntMaze ones
  on `D4RL/<name>` (`offline_rl.d4rl_maze2d`, `offline_rl.d4rl_antmaze`: D4RL's envs rebuilt on the
  `mujoco` bindings); the Kitchen ones load, but their env is not available here.
- A file without `timeouts` (older D4RL files, many users' files) gets D4RL's own rule, as
  `d4rl.qlearning_dataset` applies it: a step that is the `max_episode_steps`-th since the last
  episode end is a time-out. The limit comes from the dataset's name, its recorded task, or the
  caller's task; with none of them, a `MissingTimeoutsWarning` says that episodes end at
  `terminals` only.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from tianshou.data import ReplayBuffer

from offline_rl.d4rl_adroit import ADROIT_TASKS, d4rl_adroit_id
from offline_rl.d4rl_adroit import D4RL_EPISODE_STEPS as ADROIT_EPISODE_STEPS
from offline_rl.d4rl_antmaze import ANTMAZE_EPISODE_STEPS, d4rl_antmaze_id
from offline_rl.d4rl_maze2d import MAZE2D_EPISODE_STEPS, d4rl_maze2d_id
from offline_rl.data.hdf5_files import hdf5_for_reading
from offline_rl.data.transitions import (
    action_indices,
    make_replay_buffer,
    require_finite,
    require_flag_array,
)
from offline_rl.download import download_file
from offline_rl.errors import DatasetError, DownloadError, OfflineRLWarning
from offline_rl.scores import reference_scores

D4RL_URL_ROOT = "http://rail.eecs.berkeley.edu/datasets/offline_rl"
REQUIRED_KEYS = ("observations", "actions", "rewards", "terminals")
OPTIONAL_KEYS = ("timeouts", "next_observations")

_LOCOMOTION_ENVS = ("halfcheetah", "hopper", "walker2d", "ant")
_LOCOMOTION_KINDS = ("random", "medium", "expert", "medium-replay", "medium-expert", "full-replay")
_ANTMAZE_KINDS = ("umaze", "umaze-diverse", "medium-play", "medium-diverse", "large-play", "large-diverse")
_ADROIT_KINDS = ("human", "cloned", "expert")
_VERSIONS = ("v0", "v1", "v2")


def _locomotion_files() -> dict[str, str]:
    """D4RL's MuJoCo locomotion datasets, name -> file under `D4RL_URL_ROOT` (D4RL's `infos.py`).

    v0 (the CQL paper's tables) has no full-replay and calls medium-replay "mixed" (Walker2d's file:
    `walker_mixed`); v1 and v2 (CORL's) add full-replay and put the version in the file name."""
    files = {}
    for env in _LOCOMOTION_ENVS:
        for kind in _LOCOMOTION_KINDS:
            stem = f"{env}_{kind.replace('-', '_')}"
            if kind != "full-replay":
                mixed = f"{'walker' if env == 'walker2d' else env}_mixed"
                files[f"{env}-{kind}-v0"] = f"gym_mujoco/{mixed if kind == 'medium-replay' else stem}.hdf5"
            for version in ("v1", "v2"):
                files[f"{env}-{kind}-{version}"] = f"gym_mujoco_{version}/{stem}-{version}.hdf5"
    files["ant-random-expert-v0"] = "gym_mujoco/ant_random_expert.hdf5"
    return files


def _antmaze_files() -> dict[str, str]:
    """D4RL's AntMaze datasets, name -> file (D4RL's `locomotion/__init__.py`): v0's and v2's files
    name the mazes u-maze / big-maze / hardest-maze, v1's umaze / medium / large; v2's are the
    re-recorded `_fixed` files."""
    maze_words = {"umaze": ("u-maze", "umaze"), "medium": ("big-maze", "medium"), "large": ("hardest-maze", "large")}
    folders = {"v0": "ant_maze_new", "v1": "ant_maze_v1", "v2": "ant_maze_v2"}
    files = {}
    for kind in _ANTMAZE_KINDS:
        maze, _, variant = kind.partition("-")
        multistart, multigoal = ("False", "False") if kind == "umaze" else ("True", str(variant == "diverse"))
        for version in _VERSIONS:
            word = maze_words[maze][1 if version == "v1" else 0]
            fixed = "_fixed" if version == "v2" else ""
            file = f"Ant_maze_{word}_noisy_multistart_{multistart}_multigoal_{multigoal}_sparse{fixed}.hdf5"
            files[f"antmaze-{kind}-{version}"] = f"{folders[version]}/{file}"
    return files


def _antmaze_maze(name: str) -> str:
    """`medium` for `antmaze-medium-play-v2`."""
    return name.split("-")[1]


def _adroit_task(name: str) -> str:
    """`door` for `door-human-v1`."""
    return name.split("-", 1)[0]


def _adroit_files() -> dict[str, str]:
    """D4RL's Adroit hand datasets, name -> file (D4RL's `infos.py`): v0's files are named after the DAPG
    demonstrations they hold (`pen-v0_demos_clipped`: human, `pen-demos-v0-bc-combined`: cloned,
    `pen-v0_expert_clipped`: expert); v1's, re-recorded with `timeouts` and CORL's, after the dataset."""
    v0_stems = {"human": "{}-v0_demos_clipped", "cloned": "{}-demos-v0-bc-combined", "expert": "{}-v0_expert_clipped"}
    files = {}
    for task in ADROIT_TASKS:
        for kind in _ADROIT_KINDS:
            files[f"{task}-{kind}-v0"] = f"hand_dapg/{v0_stems[kind].format(task)}.hdf5"
            files[f"{task}-{kind}-v1"] = f"hand_dapg_v1/{task}-{kind}-v1.hdf5"
    return files


def _maze2d_files() -> dict[str, str]:
    """D4RL's v1 Maze2D datasets (CORL's), name -> file (D4RL's `infos.py`): a sparse-reward and a dense-reward
    file per maze, `maze2d-umaze-v1` being the sparse one."""
    files = {}
    for maze in MAZE2D_EPISODE_STEPS:
        files[f"maze2d-{maze}-v1"] = f"maze2d/maze2d-{maze}-sparse-v1.hdf5"
        files[f"maze2d-{maze}-dense-v1"] = f"maze2d/maze2d-{maze}-dense-v1.hdf5"
    return files


_KITCHEN_FILES = {
    "kitchen-complete-v0": "kitchen/mini_kitchen_microwave_kettle_light_slider-v0.hdf5",
    "kitchen-partial-v0": "kitchen/kitchen_microwave_kettle_light_slider-v0.hdf5",
    "kitchen-mixed-v0": "kitchen/kitchen_microwave_kettle_bottomburner_light-v0.hdf5",
}
"""D4RL's Franka Kitchen datasets (D4RL's `kitchen/__init__.py`; the CQL paper's Kitchen rows): the four
tasks microwave, kettle, light switch and slide cabinet (mixed: bottom burner for the slide cabinet),
280 steps an episode. Their env, D4RL's `KitchenTaskRelaxV1`, runs on mujoco-py and dm_control and is
not rebuilt here: they load, and `kitchen_evaluation_elsewhere` says what evaluates instead."""
_KITCHEN_EPISODE_STEPS = 280
_LOCOMOTION_FILES = _locomotion_files()
_ANTMAZE_FILES = _antmaze_files()
_ADROIT_FILES = _adroit_files()
_MAZE2D_FILES = _maze2d_files()
_D4RL_FILES = {**_LOCOMOTION_FILES, **_ANTMAZE_FILES, **_ADROIT_FILES, **_MAZE2D_FILES, **_KITCHEN_FILES}
_NAME_OF_FILE = {file.rsplit("/", 1)[1]: name for name, file in _D4RL_FILES.items()}
_COMPACT_CHUNK = 1 << 16
ANT_STATE_DIMS = 27
"""qpos[2:] and qvel of MuJoCo's ant: the observation of gymnasium's Ant-v4 at its defaults; D4RL's
Ant files append 84 contact forces to it (zero throughout, see the module docstring)."""
ANT_V2_OBSERVATION_DIMS = 111
D4RL_GYMNASIUM_TASKS = {
    "halfcheetah": "HalfCheetah-v4",
    "hopper": "Hopper-v4",
    "walker2d": "Walker2d-v4",
    "ant": "Ant-v4",
}
"""The gymnasium env each D4RL locomotion dataset evaluates on. D4RL recorded them on gym's v2 envs
under mujoco-py; gymnasium's v4 envs are the same models, rewards and time limits on the `mujoco`
bindings (v5 changed rewards and observations). The Adroit, Maze2D and AntMaze datasets evaluate on
D4RL's own envs as rebuilt here (`offline_rl.d4rl_adroit`, `offline_rl.d4rl_maze2d`,
`offline_rl.d4rl_antmaze`)."""
# D4RL's registered time limits (d4rl/locomotion/__init__.py, d4rl/gym_mujoco/__init__.py,
# d4rl/hand_manipulation_suite/__init__.py, d4rl/pointmaze/__init__.py), every version alike.
_D4RL_EPISODE_STEPS = {
    **{name: ANTMAZE_EPISODE_STEPS[_antmaze_maze(name)] for name in _ANTMAZE_FILES},
    **{name: ADROIT_EPISODE_STEPS[_adroit_task(name)] for name in _ADROIT_FILES},
    **{name: MAZE2D_EPISODE_STEPS[name.split("-")[1]] for name in _MAZE2D_FILES},
    **dict.fromkeys(_KITCHEN_FILES, _KITCHEN_EPISODE_STEPS),
}
_D4RL_DEFAULT_EPISODE_STEPS = 1000


class MissingTimeoutsWarning(OfflineRLWarning):
    """A file without `timeouts` whose episode length is unknown: episodes end at `terminals` only."""


def d4rl_episode_steps(name: str) -> int | None:
    """The time limit D4RL registers for a dataset name, None for a name D4RL does not have."""
    if not is_d4rl_name(name):
        return None
    return _D4RL_EPISODE_STEPS.get(name, _D4RL_DEFAULT_EPISODE_STEPS)


def d4rl_gymnasium_task(name: str | None) -> str | None:
    """The gymnasium id that evaluates a named D4RL dataset (`Walker2d-v4` for `walker2d-medium-v2`
    and `walker2d-medium-v0` alike; `D4RL/door-v1`, D4RL's door env on Gymnasium-Robotics' hand, for
    `door-human-v1` and `door-human-v0`; `D4RL/maze2d-umaze-v1`, D4RL's Maze2D env rebuilt, for
    `maze2d-umaze-v1`; `D4RL/antmaze-medium-v2`, D4RL's AntMaze env rebuilt, for `antmaze-medium-play-v2`,
    and `D4RL/antmaze-medium-v0`, its goal drawn once per env, for the v0 and v1 files), None for other names."""
    if env := _locomotion_env(name):
        return D4RL_GYMNASIUM_TASKS[env]
    if name in _ADROIT_FILES:
        return d4rl_adroit_id(_adroit_task(name))
    if name in _MAZE2D_FILES:  # D4RL's env id is the dataset's name: `maze2d-umaze-dense-v1`
        maze, *dense = name.split("-")[1:-1]
        return d4rl_maze2d_id(maze, "dense" if dense else "sparse")
    if name in _ANTMAZE_FILES:  # every dataset of a maze evaluates on its maze; v2 draws the goal per episode
        return d4rl_antmaze_id(_antmaze_maze(name), "v2" if name.endswith("-v2") else "v0")
    return None


def kitchen_evaluation_elsewhere(name: str | None) -> str | None:
    """For a D4RL Franka Kitchen name, whose env is not available here: what trains and evaluates instead
    (one clause for an error); None for other names."""
    if name not in _KITCHEN_FILES:
        return None
    minari = f"D4RL/kitchen/{name.split('-')[1]}-v2"
    return (
        f"{name} is D4RL's Franka Kitchen data, whose env (D4RL's KitchenTaskRelaxV1, on mujoco-py and "
        f"dm_control) is not available here; its counterpart Minari's {minari}, the same four tasks recorded "
        f"on Gymnasium-Robotics' FrankaKitchen-v1, trains and evaluates here: --dataset {minari}"
    )


def _locomotion_env(name: str | None) -> str | None:
    """`hopper` for `hopper-medium-v0`: the environment of a D4RL locomotion name, None for other names."""
    return name.split("-", 1)[0] if name in _LOCOMOTION_FILES else None


def timeouts_from_episode_limit(terminals: np.ndarray, max_episode_steps: int) -> np.ndarray:
    """D4RL's rule for files without `timeouts`: the step `max_episode_steps − 1` after an episode
    start (the first step, or the step after a terminal or an earlier time-out) is a time-out."""
    steps = np.arange(len(terminals))
    starts = np.maximum.accumulate(np.where(np.r_[True, np.asarray(terminals[:-1], dtype=bool)], steps, 0))
    return (steps - starts) % max_episode_steps == max_episode_steps - 1


def d4rl_url(name: str) -> str:
    """D4RL's public download URL for a dataset name such as `halfcheetah-medium-v2`."""
    if name in _D4RL_FILES:
        return f"{D4RL_URL_ROOT}/{_D4RL_FILES[name]}"
    closest = closest_d4rl_name(name)
    raise DatasetError(
        f"unknown D4RL dataset name '{name}'{f' (did you mean {closest}?)' if closest else ''}; "
        f"expected e.g. halfcheetah-medium-v2 ({_choices(_LOCOMOTION_ENVS)}-{_choices(_LOCOMOTION_KINDS)}-"
        f"{_choices(_VERSIONS)}, full-replay from v1), antmaze-{_choices(_ANTMAZE_KINDS)}-{_choices(_VERSIONS)}, "
        f"{_choices(ADROIT_TASKS)}-{_choices(_ADROIT_KINDS)}-{_choices(_VERSIONS[:2])}, "
        f"maze2d-{_choices(MAZE2D_EPISODE_STEPS)}[-dense]-v1, kitchen-{{complete,partial,mixed}}-v0, or a path to "
        "an HDF5 file"
    )


def _choices(words: Iterable[str]) -> str:
    return "{" + ",".join(words) + "}"


def is_d4rl_name(source: str) -> bool:
    """Whether `source` is a D4RL dataset name this package knows how to find and download."""
    return source in _D4RL_FILES


def d4rl_names() -> list[str]:
    """Every D4RL dataset name this package can find and download: MuJoCo locomotion and AntMaze, v0 to
    v2; Adroit, v0 and v1; Maze2D, v1."""
    return list(_D4RL_FILES)


_TFDS_NAME = re.compile(
    r"d4rl_(?:mujoco|adroit)_(?P<env>[a-z0-9]+)/(?P<version>v\d+)-(?P<kind>[a-z-]+)"
    r"|d4rl_antmaze/(?P<maze>[a-z-]+)-(?P<maze_version>v\d+)"
)


def d4rl_name_of_tfds(name: str) -> str | None:
    """D4RL's name of a TFDS (RLDS) D4RL dataset, which TFDS builds from D4RL's own files and TF-Agents'
    CQL README names (`d4rl_mujoco_halfcheetah/v0-medium-expert` is halfcheetah-medium-expert-v0,
    `d4rl_antmaze/medium-play-v0` antmaze-medium-play-v0, `d4rl_adroit_door/v1-human` door-human-v1);
    None for other names."""
    match = _TFDS_NAME.fullmatch(str(name).strip())
    if match is None:
        return None
    if match["env"]:
        return f"{match['env']}-{match['kind']}-{match['version']}"
    return f"antmaze-{match['maze']}-{match['maze_version']}"


def closest_d4rl_name(name: str) -> str | None:
    """The D4RL name a near miss stands for (`halfchetah_medium-v2`, `Hopper-Medium-Expert`: underscores,
    case and typos; v2 when no version is given), or a TFDS copy of a D4RL dataset stands for
    (`d4rl_mujoco_hopper/v0-medium`); None for anything else, other ids with a `/` (Minari's) included. A
    version D4RL lacks for that dataset (`hopper-full-replay-v0`) is told the nearest one that exists,
    never swapped in silently."""
    import difflib

    if "/" in str(name):
        tfds = d4rl_name_of_tfds(name)
        return tfds if tfds in _D4RL_FILES else None
    wanted = str(name).strip().lower().replace("_", "-")
    if not re.search(r"-v\d+$", wanted):
        wanted += "-v2"
    matches = difflib.get_close_matches(wanted, d4rl_names(), n=1, cutoff=0.85)
    return matches[0] if matches else None


def d4rl_dataset_dir() -> Path:
    """Where D4RL keeps datasets: `$D4RL_DATASET_DIR`, else `~/.d4rl/datasets` (D4RL's default)."""
    return Path(os.environ.get("D4RL_DATASET_DIR") or Path.home() / ".d4rl" / "datasets").expanduser()


def d4rl_path(name: str) -> Path:
    """Local path of a named dataset: D4RL's own file name, the basename of its download URL."""
    return d4rl_dataset_dir() / d4rl_url(name).rsplit("/", 1)[1]


def _name_from_filename(path: Path) -> str | None:
    """The D4RL dataset name of a file D4RL downloaded (its own file name: `hopper_medium.hdf5` is
    hopper-medium-v0), or of a file named after the dataset (`hopper-medium-v2.hdf5`)."""
    candidate = path.stem.replace("_", "-")
    named = candidate in _LOCOMOTION_FILES or candidate in _ADROIT_FILES or candidate in _MAZE2D_FILES
    return _NAME_OF_FILE.get(path.name) or (candidate if named else None)


def resolve_d4rl_source(source: str | os.PathLike[str], *, download: bool = True) -> tuple[Path, str | None]:
    """Map a path or a D4RL dataset name to a file on disk, downloading a named dataset if needed."""
    path = Path(source).expanduser()
    if path.exists():
        return path, _name_from_filename(path)
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
    if _locomotion_env(name) != "ant" or arrays["observations"].shape[1:] != (ANT_V2_OBSERVATION_DIMS,):
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
    from offline_rl.envs import episode_limit

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
    from offline_rl.data.detect import detect_format

    try:
        kind = detect_format(path)
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
    """Scalars under `metadata/` (written by `offline_rl.apps.dataset_generation` and by D4RL itself)."""
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
