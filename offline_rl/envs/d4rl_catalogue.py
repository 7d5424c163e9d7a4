"""TODO"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from pathlib import Path

from offline_rl.core.errors import DatasetError
from offline_rl.envs.adroit import ADROIT_TASKS, d4rl_adroit_id
from offline_rl.envs.adroit import D4RL_EPISODE_STEPS as ADROIT_EPISODE_STEPS
from offline_rl.envs.antmaze import ANTMAZE_EPISODE_STEPS, d4rl_antmaze_id
from offline_rl.envs.maze2d import MAZE2D_EPISODE_STEPS, d4rl_maze2d_id

D4RL_URL_ROOT = "http://rail.eecs.berkeley.edu/datasets/offline_rl"

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

D4RL_GYMNASIUM_TASKS = {
    "halfcheetah": "HalfCheetah-v4",
    "hopper": "Hopper-v4",
    "walker2d": "Walker2d-v4",
    "ant": "Ant-v4",
}
"""The gymnasium env each D4RL locomotion dataset evaluates on. D4RL recorded them on gym's v2 envs
under mujoco-py; gymnasium's v4 envs are the same models, rewards and time limits on the `mujoco`
bindings (v5 changed rewards and observations). The Adroit, Maze2D and AntMaze datasets evaluate on
D4RL's own envs as rebuilt here (`offline_rl.envs.adroit`, `offline_rl.envs.maze2d`,
`offline_rl.envs.antmaze`)."""

# D4RL's registered time limits (d4rl/locomotion/__init__.py, d4rl/gym_mujoco/__init__.py,
# d4rl/hand_manipulation_suite/__init__.py, d4rl/pointmaze/__init__.py), every version alike.
_D4RL_EPISODE_STEPS = {
    **{name: ANTMAZE_EPISODE_STEPS[_antmaze_maze(name)] for name in _ANTMAZE_FILES},
    **{name: ADROIT_EPISODE_STEPS[_adroit_task(name)] for name in _ADROIT_FILES},
    **{name: MAZE2D_EPISODE_STEPS[name.split("-")[1]] for name in _MAZE2D_FILES},
    **dict.fromkeys(_KITCHEN_FILES, _KITCHEN_EPISODE_STEPS),
}

_D4RL_DEFAULT_EPISODE_STEPS = 1000


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
    if env := locomotion_env(name):
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


def locomotion_env(name: str | None) -> str | None:
    """`hopper` for `hopper-medium-v0`: the environment of a D4RL locomotion name, None for other names."""
    return name.split("-", 1)[0] if name in _LOCOMOTION_FILES else None


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

    if "/" in str(name):
        tfds = d4rl_name_of_tfds(name)
        return tfds if tfds in _D4RL_FILES else None
    wanted = str(name).strip().lower().replace("_", "-")
    if not re.search(r"-v\d+$", wanted):
        wanted += "-v2"
    matches = difflib.get_close_matches(wanted, d4rl_names(), n=1, cutoff=0.85)
    return matches[0] if matches else None


def d4rl_name_of_file(path: Path) -> str | None:
    """The D4RL dataset name of a file D4RL downloaded (its own file name: `hopper_medium.hdf5` is
    hopper-medium-v0), or of a file named after the dataset (`hopper-medium-v2.hdf5`)."""
    candidate = path.stem.replace("_", "-")
    named = candidate in _LOCOMOTION_FILES or candidate in _ADROIT_FILES or candidate in _MAZE2D_FILES
    return _NAME_OF_FILE.get(path.name) or (candidate if named else None)
