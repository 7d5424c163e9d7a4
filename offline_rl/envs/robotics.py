"""Gymnasium-Robotics' envs (AntMaze, PointMaze, Adroit, Franka Kitchen), registered on first use and
repaired where today's MuJoCo breaks them.

Gymnasium-Robotics reads and writes a named joint's qpos/qvel through helpers that assert the joint type
is one of MuJoCo's enums; from MuJoCo 3.12 an enum no longer equals the numpy integer the model holds, so
Franka Kitchen, Fetch and the Shadow hand fail at `gym.make`. `repair_joint_accessors` replaces the
helpers with ones comparing Python ints (a no-op where the enums still compare equal); the slices they
return are MuJoCo's own layout for each joint type, what the originals return.

Each AntMaze and PointMaze env writes its maze's MJCF model into the system's temporary folder and never
removes it (one shared `ant_maze.xml` for AntMaze v3, which a second user cannot overwrite).
`keep_maze_models_private` gives every maze a fresh folder for the file and removes it once the model is
read; the env is unchanged.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import os
import shutil
import tempfile
import types
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

if TYPE_CHECKING:
    pass


def enums_equal_numpy_integers() -> bool:
    """Whether this MuJoCo's enums compare equal to the numpy integers a model's arrays hold."""
    import mujoco  # heavy (MuJoCo): loaded only when used

    kind = mujoco.mjtJoint.mjJNT_HINGE
    return np.int32(int(kind)) in (kind,)


def _joint_slice(model: Any, name: str, *, velocity: bool) -> slice:
    import mujoco  # heavy (MuJoCo): loaded only when used

    joint = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
    if joint == -1:
        raise ValueError(f"joint '{name}' is not part of the model")
    widths = {int(mujoco.mjtJoint.mjJNT_FREE): (7, 6), int(mujoco.mjtJoint.mjJNT_BALL): (4, 3)}  # (qpos, qvel)
    width = widths.get(int(model.jnt_type[joint]), (1, 1))[int(velocity)]  # hinge and slide: one number each
    start = int(model.jnt_dofadr[joint] if velocity else model.jnt_qposadr[joint])
    return slice(start, start + width)


def get_joint_qpos(model: Any, data: Any, name: str) -> np.ndarray:
    return data.qpos[_joint_slice(model, name, velocity=False)].copy()


def get_joint_qvel(model: Any, data: Any, name: str) -> np.ndarray:
    return data.qvel[_joint_slice(model, name, velocity=True)].copy()


def set_joint_qpos(model: Any, data: Any, name: str, value: Any) -> None:
    data.qpos[_joint_slice(model, name, velocity=False)] = value


def set_joint_qvel(model: Any, data: Any, name: str, value: Any) -> None:
    data.qvel[_joint_slice(model, name, velocity=True)] = value


@functools.cache
def repair_joint_accessors() -> bool:
    """Install the accessors above in Gymnasium-Robotics when this MuJoCo needs them. Returns whether it
    did. Its envs look the helpers up in their module at each call (`robot_get_obs`, `self._utils`), so
    envs made afterwards, in this process, use the replacements."""
    if enums_equal_numpy_integers():
        return False
    try:
        from gymnasium_robotics.utils import mujoco_utils  # heavy (Gymnasium-Robotics, MuJoCo): loaded only when used
    except ImportError:
        return False
    for accessor in (get_joint_qpos, get_joint_qvel, set_joint_qpos, set_joint_qvel):
        setattr(mujoco_utils, accessor.__name__, accessor)
    return True


PRIVATE_FOLDER_PREFIX = "offline_rl-maze-"


@contextlib.contextmanager
def _private_temporary_directory(*args: Any, **kwargs: Any) -> Iterator[str]:
    """Stands in for `tempfile.TemporaryDirectory` in the maze modules. They write their model next to
    the folder it yields (`path.dirname(tmp_dir)`), so the folder is a child of a fresh private one, and
    it stays after the block: the env reads the model only later, in its own `__init__`."""
    private = tempfile.mkdtemp(prefix=PRIVATE_FOLDER_PREFIX)
    child = os.path.join(private, "model")
    os.mkdir(child)
    yield child


def _private_tempfile_module() -> types.SimpleNamespace:
    return types.SimpleNamespace(**{**vars(tempfile), "TemporaryDirectory": _private_temporary_directory})


def _removing_model_folder(init: Callable[..., None]) -> Callable[..., None]:
    """The env's `__init__`, followed (also when it fails) by removing the private folder its model was
    written into; a path outside such a folder (an unpatched writer) is left alone."""

    @functools.wraps(init)
    def initialise(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            init(self, *args, **kwargs)
        finally:
            model_path = getattr(self, "tmp_xml_file_path", None)
            if model_path is not None:
                folder = os.path.dirname(str(model_path))
                if os.path.basename(folder).startswith(PRIVATE_FOLDER_PREFIX):
                    shutil.rmtree(folder, ignore_errors=True)

    initialise.__offline_rl_private_model__ = True  # type: ignore[attr-defined]
    return initialise


_WRITERS = ("gymnasium_robotics.envs.maze.maze", "gymnasium_robotics.envs.maze.maze_v4")
_ENVS = (
    ("gymnasium_robotics.envs.maze.ant_maze_v3", "AntMazeEnv"),
    ("gymnasium_robotics.envs.maze.ant_maze_v4", "AntMazeEnv"),
    ("gymnasium_robotics.envs.maze.ant_maze_v5", "AntMazeEnv"),
    ("gymnasium_robotics.envs.maze.point_maze", "PointMazeEnv"),
)


def keep_maze_models_private() -> None:
    """Install the private folders in Gymnasium-Robotics' maze modules (idempotent). A module or class a
    later release renames or drops is skipped: its envs then behave as that release writes them."""

    for module_name in _WRITERS:
        with contextlib.suppress(ImportError):
            module = importlib.import_module(module_name)
            if getattr(module, "tempfile", None) is tempfile:
                module.tempfile = _private_tempfile_module()
    for module_name, class_name in _ENVS:
        with contextlib.suppress(ImportError):
            env_class = getattr(importlib.import_module(module_name), class_name, None)
            init = getattr(env_class, "__init__", None)
            if init is not None and not getattr(init, "__offline_rl_private_model__", False):
                env_class.__init__ = _removing_model_folder(init)


@functools.cache
def register_robotics() -> bool:
    """Register Gymnasium-Robotics' envs (AntMaze, PointMaze, Adroit, Franka Kitchen: the envs of
    Minari's D4RL datasets) when it is installed. It is optional: `pip install gymnasium-robotics`.
    Its import prints a note on Adroit's reward versions to stderr, which is not about the user's run."""

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            import gymnasium_robotics  # heavy (Gymnasium-Robotics): loaded only when used
    except ImportError:
        return False
    repair_joint_accessors()  # Franka Kitchen, Fetch, the Shadow hand: made only after this on MuJoCo >= 3.12
    keep_maze_models_private()  # AntMaze and PointMaze: no model file left in /tmp per env
    gym.register_envs(gymnasium_robotics)
    return True


_ROBOTICS_PREFIXES = ("AntMaze", "PointMaze", "Adroit", "FrankaKitchen", "Fetch", "HandManipulate", "HandReach")


def _is_robotics(task: str) -> bool:
    return task.startswith(_ROBOTICS_PREFIXES)
