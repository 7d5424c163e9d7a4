"""Building gymnasium environments by id, and checking a dataset fits one.

ale-py's environments are registered on demand, so Atari ids (`PongNoFrameskip-v4`,
`ALE/Pong-v5`) work wherever MuJoCo ids do.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
from tianshou.data import ReplayBuffer

from offline_rl.errors import OfflineRLError


def _register_atari() -> None:
    try:
        import ale_py
    except ImportError:  # pragma: no cover - ale-py is a hard dependency
        return
    gym.register_envs(ale_py)


_HARMLESS_MUJOCO_WARNINGS = ("compiler attribute 'settotalmass' is deprecated",)


@functools.cache
def _route_mujoco_warnings() -> None:
    """Send MuJoCo's warnings through Python's `warnings`, minus one known-harmless deprecation.

    MuJoCo ≥ 3.x prints a deprecation for an attribute of gymnasium's bundled models at every env
    creation (ten evaluation envs: ten copies) and appends it to MUJOCO_LOG.TXT in the current
    directory; routed here, it is dropped and no log file appears.
    """
    try:
        import mujoco
    except ImportError:  # pragma: no cover - mujoco is a hard dependency
        return

    def handle(message: str) -> None:
        if not any(harmless in message for harmless in _HARMLESS_MUJOCO_WARNINGS):
            warnings.warn(f"MuJoCo: {message}", RuntimeWarning, stacklevel=2)

    mujoco.set_mju_user_warning(handle)


def make_env(task: str, **kwargs: Any) -> gym.Env:
    """`gymnasium.make(task)`, with a one-line error naming `--task` for an unknown id."""
    if "NoFrameskip" in task or task.startswith("ALE/"):
        _register_atari()
    else:
        _route_mujoco_warnings()
    try:
        return gym.make(task, **kwargs)
    except gym.error.Error as error:
        raise OfflineRLError(f"--task '{task}': {error}") from None


def check_dataset_fits_env(buffer: ReplayBuffer, task: str, *, source: str) -> None:
    """Refuse a dataset whose observation or action shape differs from `task`'s env."""
    env = make_env(task)
    try:
        # Through indexing, not `buffer.obs`: frame buffers rebuild observations and store none.
        obs_shape = tuple(np.asarray(buffer[np.array([0])].obs).shape[1:])
        expected_obs = tuple(env.observation_space.shape or ())
        if obs_shape != expected_obs:
            raise OfflineRLError(
                f"{source}: observations have shape {obs_shape}, but --task {task} observes {expected_obs}"
            )
        act = np.asarray(buffer.act[:1])
        space = env.action_space
        if isinstance(space, gym.spaces.Box):
            expected_act = tuple(space.shape)
            if tuple(act.shape[1:]) != expected_act:
                raise OfflineRLError(
                    f"{source}: actions have shape {tuple(act.shape[1:])}, but --task {task} expects {expected_act}"
                )
        elif isinstance(space, gym.spaces.Discrete):
            top = int(np.max(buffer.act[: len(buffer)]))
            if act.ndim != 1 or top >= int(space.n):
                raise OfflineRLError(
                    f"{source}: actions are not indices below {space.n} (found max {top}, shape "
                    f"{tuple(act.shape[1:])}), as --task {task} expects"
                )
    finally:
        env.close()


def is_atari_task(task: str) -> bool:
    return "NoFrameskip" in task or task.startswith("ALE/")


def make_atari_env(task: str, frames_stack: int = 4, **kwargs: Any) -> gym.Env:
    """DeepMind-style Atari: gymnasium's `AtariPreprocessing` (frame skip 4, 84×84 grayscale, up to
    30 no-ops at reset) and `FrameStackObservation(frames_stack)`.

    Whole games with unclipped rewards (no life-loss terminals), as evaluation needs. `ALE/*-v5`
    ids get `frameskip=1` so that the skipping happens once, in the preprocessing wrapper.
    """
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    if task.startswith("ALE/"):
        kwargs.setdefault("frameskip", 1)
    env = make_env(task, **kwargs)
    env = AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84, terminal_on_life_loss=False)
    return FrameStackObservation(env, frames_stack)
