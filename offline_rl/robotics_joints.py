"""Gymnasium-Robotics' joint accessors, working again under the MuJoCo releases (3.12 on) whose enums
stopped equalling numpy integers.

Gymnasium-Robotics (1.4.2, the newest release) reads and writes a named joint's qpos/qvel through four
helpers in `gymnasium_robotics.utils.mujoco_utils` that end in `assert joint_type in
(mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE)`, `joint_type` being a `np.int32` from
`model.jnt_type`. Up to MuJoCo 3.11 that membership test holds; from 3.12 (measured: every release from
3.12.0 to 4.0.0) an enum compared with a numpy integer is unequal, so every hinge or slide joint fails
the assertion. Franka Kitchen (the env of Minari's `D4RL/kitchen/*` datasets, the CQL paper's Kitchen
tasks), Fetch and the Shadow hand then cannot even be made: `gym.make("FrankaKitchen-v1")` raises a
bare AssertionError. AntMaze, PointMaze and Adroit do not use the helpers and are unaffected.

`repair_joint_accessors()` replaces the four helpers with ones that compare the joint type as a Python
int, and is a no-op where MuJoCo's enums still compare equal. Positions and velocities are the slices
MuJoCo's own layout gives each joint type (free 7/6, ball 4/3, hinge and slide 1/1), which is what the
originals return for every joint these envs name: on MuJoCo 3.10 and 3.11, where the originals work, 50
steps of FrankaKitchen-v1, FetchPickAndPlace-v4 and HandManipulateBlock-v1 are bit-identical with either.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np


def enums_equal_numpy_integers() -> bool:
    """Whether this MuJoCo's enums compare equal to the numpy integers a model's arrays hold."""
    import mujoco

    kind = mujoco.mjtJoint.mjJNT_HINGE
    return np.int32(int(kind)) in (kind,)


def _joint_slice(model: Any, name: str, *, velocity: bool) -> slice:
    import mujoco

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
        from gymnasium_robotics.utils import mujoco_utils
    except ImportError:
        return False
    for accessor in (get_joint_qpos, get_joint_qvel, set_joint_qpos, set_joint_qvel):
        setattr(mujoco_utils, accessor.__name__, accessor)
    return True
