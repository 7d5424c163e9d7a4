"""A MuJoCo env whose place in its episode can be kept in a checkpoint and put back: what an online
run needs to go on after a stop exactly as if it had never stopped.

The state is plain values: the simulator's positions, velocities, actuator activations and time, the
steps the time limit has counted, and the env's random generator (which draws each reset's noise).
`resume_state` reads it and, assigned, restores it. Tianshou's vector envs reach an env's attributes on
its unwrapped env alone (`get_env_attr` / `set_env_attr`, in this process or in the env's own), so the
wrapper keeps the state current there after every reset and step (`STATE_ATTRIBUTE`), and applies a
state set there (`RESTORE_ATTRIBUTE`) before its next step.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

STATE_ATTRIBUTE = "offline_rl_episode_state"
"""The unwrapped env's attribute holding where it is in its episode, as of its latest reset or step."""
RESTORE_ATTRIBUTE = "offline_rl_restore_episode_state"
"""The unwrapped env's attribute that, set to such a state, puts the env back there before its next step."""


class ResumableMujocoEnv(gym.Wrapper):
    """Any gymnasium MuJoCo env (`env.unwrapped.data` and `set_state`), its episode resumable."""

    def reset(self, **kwargs: Any) -> Any:
        result = self.env.reset(**kwargs)
        setattr(self.env.unwrapped, STATE_ATTRIBUTE, self.resume_state)
        return result

    def step(self, action: Any) -> Any:
        base = self.env.unwrapped
        pending = getattr(base, RESTORE_ATTRIBUTE, None)
        if pending is not None:
            self.resume_state = pending
            setattr(base, RESTORE_ATTRIBUTE, None)
        result = self.env.step(action)
        setattr(base, STATE_ATTRIBUTE, self.resume_state)
        return result

    @property
    def resume_state(self) -> dict[str, Any]:
        base = self.env.unwrapped
        data = base.data  # type: ignore[attr-defined]
        return {
            "qpos": np.array(data.qpos).tolist(),
            "qvel": np.array(data.qvel).tolist(),
            "act": np.array(data.act).tolist(),
            "time": float(data.time),
            "elapsed_steps": _time_limit_steps(self.env),
            "np_random": _plain(base.np_random.bit_generator.state),
        }

    @resume_state.setter
    def resume_state(self, state: dict[str, Any]) -> None:
        base = self.env.unwrapped
        base.set_state(np.asarray(state["qpos"], dtype=np.float64), np.asarray(state["qvel"], dtype=np.float64))  # type: ignore[attr-defined]
        data = base.data  # type: ignore[attr-defined]
        if len(state["act"]):
            data.act[:] = np.asarray(state["act"], dtype=np.float64)
        data.time = float(state["time"])
        _set_time_limit_steps(self.env, state["elapsed_steps"])
        base.np_random.bit_generator.state = state["np_random"]


def _wrappers(env: gym.Env) -> list[gym.Env]:
    chain = [env]
    while isinstance(chain[-1], gym.Wrapper):
        chain.append(chain[-1].env)
    return chain


def _time_limit_steps(env: gym.Env) -> int | None:
    limits = [wrapper for wrapper in _wrappers(env) if isinstance(wrapper, gym.wrappers.TimeLimit)]
    return int(limits[0]._elapsed_steps) if limits and limits[0]._elapsed_steps is not None else None


def _set_time_limit_steps(env: gym.Env, steps: int | None) -> None:
    for wrapper in _wrappers(env):
        if isinstance(wrapper, gym.wrappers.TimeLimit):
            wrapper._elapsed_steps = steps


def _plain(value: Any) -> Any:
    """A random generator's state as plain Python values (a checkpoint is read without unpickling objects)."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, np.integer):
        return int(value)
    return value


def resumable_where_possible(env: gym.Env) -> gym.Env:
    """`env` as a `ResumableMujocoEnv` where its whole episode state is the simulator's (gymnasium's own
    MuJoCo tasks); any other env as it is (a run resumed with it starts new episodes)."""
    module = type(env.unwrapped).__module__
    return ResumableMujocoEnv(env) if module.startswith("gymnasium.envs.mujoco") else env
