"""D4RL's Adroit hand envs (pen, door, hammer, relocate) on Gymnasium-Robotics' hands, with D4RL's rewards.

D4RL recorded its Adroit datasets on its own `hand_manipulation_suite` envs (mujoco-py). Gymnasium-Robotics
ported them to the `mujoco` bindings as `AdroitHand*-v1`: the same models, actions and observations,
but three things differ from the envs the data and D4RL's reference scores come from:

- door, hammer and relocate pay +0.1·‖palm − object‖ where D4RL pays −0.1·‖palm − object‖: a sign
  flipped by a refactor in Gymnasium-Robotics 1.2.1 (found in its PR #220) and kept under the v1 ids;
  the fix ships only as the v2 envs of 1.4.3 (PR #306). Its v1 envs reward reaching away from the
  handle, hammer or ball.
- pen does not end when the pen is dropped; D4RL's does (its datasets' `terminals` are those drops).
- pen's time limit is 200 steps; D4RL's is 100 (the other three: 200 in both).

`D4RL/pen-v1`, `D4RL/door-v1`, `D4RL/hammer-v1` and `D4RL/relocate-v1` are those hands with D4RL's
reward, end and time limit: the reward is recomputed from the simulator's state after every step, as
D4RL's envs define it, so it does not depend on which Gymnasium-Robotics version is installed. They
are registered with gymnasium when `offline_rl.envs.make` is imported; the D4RL Adroit datasets evaluate
on them, and their normalised scores use D4RL's reference returns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from offline_rl.core.errors import OfflineRLError
from offline_rl.envs.rebuilt import register_once
from offline_rl.envs.robotics import register_robotics

ADROIT_TASKS = ("pen", "door", "hammer", "relocate")
D4RL_EPISODE_STEPS = {"pen": 100, "door": 200, "hammer": 200, "relocate": 200}
"""D4RL's registered time limits (`d4rl/hand_manipulation_suite/__init__.py`), the same for v0 and v1."""
PEN_DROP_HEIGHT = 0.075
"""D4RL's pen episode ends (terminated, reward −5) when the pen's centre falls below this height."""
_GYMNASIUM_ROBOTICS_IDS = {task: f"AdroitHand{task.capitalize()}-v1" for task in ADROIT_TASKS}


def d4rl_adroit_id(task: str) -> str:
    """The gymnasium id of D4RL's env for one Adroit task: `D4RL/door-v1` for `door`."""
    return f"D4RL/{task}-v1"


def adroit_task_of(env_id: str) -> str | None:
    """`door` for `D4RL/door-v1`, and for D4RL's own ids of that env (`door-v0`, `door-v1`); None for others."""
    for task in ADROIT_TASKS:
        if env_id in (d4rl_adroit_id(task), f"{task}-v0", f"{task}-v1"):
            return task
    return None


class _Scene:
    """Positions the rewards read, by the names D4RL's and Gymnasium-Robotics' models share."""

    def __init__(self, env: gym.Env) -> None:
        import mujoco  # heavy (MuJoCo): loaded only when used

        self.model, self.data = env.unwrapped.model, env.unwrapped.data  # type: ignore[attr-defined]
        self._mujoco = mujoco
        self._ids: dict[tuple[Any, str], int] = {}  # looked up once: every evaluation step reads the same names

    def site(self, name: str) -> np.ndarray:
        return self.data.site_xpos[self._id(self._mujoco.mjtObj.mjOBJ_SITE, name)].copy()

    def body(self, name: str) -> np.ndarray:
        return self.data.xpos[self._id(self._mujoco.mjtObj.mjOBJ_BODY, name)].copy()

    def joint_position(self, name: str) -> float:
        joint = self._id(self._mujoco.mjtObj.mjOBJ_JOINT, name)
        return float(self.data.qpos[self.model.jnt_qposadr[joint]])

    def velocities(self) -> np.ndarray:
        return self.data.qvel.copy()

    def _id(self, kind: Any, name: str) -> int:
        if (kind, name) not in self._ids:
            index = int(self._mujoco.mj_name2id(self.model, kind, name))
            if index < 0:
                raise OfflineRLError(f"Gymnasium-Robotics' Adroit model has no {kind.name[6:].lower()} '{name}'")
            self._ids[kind, name] = index
        return self._ids[kind, name]


def _distance(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b))


def pen_reward(scene: _Scene) -> tuple[float, bool]:
    """Pen in hand to the target's position and orientation; a dropped pen costs 5 and ends the episode."""
    position = scene.body("Object")
    distance = _distance(position, scene.site("eps_ball"))
    pen = scene.site("object_top") - scene.site("object_bottom")
    target = scene.site("target_top") - scene.site("target_bottom")
    similarity = float(np.dot(pen / np.linalg.norm(pen), target / np.linalg.norm(target)))
    reward = -distance + similarity
    reward += 10.0 if distance < 0.075 and similarity > 0.9 else 0.0
    reward += 50.0 if distance < 0.075 and similarity > 0.95 else 0.0
    dropped = bool(position[2] < PEN_DROP_HEIGHT)
    return reward - (5.0 if dropped else 0.0), dropped


def door_reward(scene: _Scene) -> tuple[float, bool]:
    """Palm to the handle, door towards 1.57 rad, a small velocity cost, bonuses as the door opens."""
    door = scene.joint_position("door_hinge")
    reward = -0.1 * _distance(scene.site("S_grasp"), scene.site("S_handle"))
    reward += -0.1 * (door - 1.57) ** 2 - 1e-5 * float(np.sum(scene.velocities() ** 2))
    reward += (2.0 if door > 0.2 else 0.0) + (8.0 if door > 1.0 else 0.0) + (10.0 if door > 1.35 else 0.0)
    return reward, False


def hammer_reward(scene: _Scene) -> tuple[float, bool]:
    """Palm to the hammer, its head to the nail, the nail into the board; bonuses for lifting and driving."""
    hammer, tool = scene.body("Object"), scene.site("tool")
    nail, goal = scene.site("S_target"), scene.site("nail_goal")
    driven = _distance(nail, goal)
    reward = -0.1 * _distance(scene.site("S_grasp"), hammer) - _distance(tool, nail) - 10.0 * driven
    reward -= 1e-2 * float(np.linalg.norm(scene.velocities()))
    reward += 2.0 if hammer[2] > 0.04 and tool[2] > 0.04 else 0.0
    reward += (25.0 if driven < 0.02 else 0.0) + (75.0 if driven < 0.01 else 0.0)
    return reward, False


def relocate_reward(scene: _Scene) -> tuple[float, bool]:
    """Palm to the ball; once lifted, palm and ball to the target; bonuses near the target."""
    ball, palm, target = scene.body("Object"), scene.site("S_grasp"), scene.site("target")
    reward = -0.1 * _distance(palm, ball)
    if ball[2] > 0.04:
        reward += 1.0 - 0.5 * _distance(palm, target) - 0.5 * _distance(ball, target)
    to_target = _distance(ball, target)
    reward += (10.0 if to_target < 0.1 else 0.0) + (20.0 if to_target < 0.05 else 0.0)
    return reward, False


D4RL_REWARDS: dict[str, Callable[[_Scene], tuple[float, bool]]] = {
    "pen": pen_reward,
    "door": door_reward,
    "hammer": hammer_reward,
    "relocate": relocate_reward,
}
"""Each task's reward and whether the step ends the episode, as D4RL's `*EnvV0.step` computes them."""


class D4RLAdroitReward(gym.Wrapper):
    """A Gymnasium-Robotics Adroit hand that pays D4RL's reward and ends where D4RL's env ends."""

    def __init__(self, env: gym.Env, task: str) -> None:
        super().__init__(env)
        self.task = task
        self._reward = D4RL_REWARDS[task]
        self._scene = _Scene(env)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        observation, _, terminated, truncated, info = self.env.step(action)
        reward, ends = self._reward(self._scene)
        return observation, reward, bool(terminated or ends), truncated, info


def make_d4rl_adroit(task: str, **kwargs: Any) -> gym.Env:
    """The entry point of `D4RL/<task>-v1`: Gymnasium-Robotics' hand without its own time limit (the
    registration sets D4RL's), wrapped to pay D4RL's reward."""
    if not register_robotics():
        raise OfflineRLError(
            f"{d4rl_adroit_id(task)} (D4RL's {task} env) runs on Gymnasium-Robotics' Adroit hand: "
            "pip install gymnasium-robotics (or the [robotics] extra)"
        )
    # the bare hand: gymnasium's own wrappers go around D4RL's env instead, with D4RL's time limit
    hand = gym.make(_GYMNASIUM_ROBOTICS_IDS[task], disable_env_checker=True, **kwargs).unwrapped
    return D4RLAdroitReward(hand, task)


def register_d4rl_adroit() -> None:
    """Register `D4RL/<task>-v1` for the four tasks (idempotent; makes nothing until an env is made)."""
    for task in ADROIT_TASKS:
        register_once(d4rl_adroit_id(task), f"{__name__}:make_d4rl_adroit", D4RL_EPISODE_STEPS[task], task=task)
