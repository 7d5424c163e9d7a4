"""The plumbing D4RL's envs rebuilt on the `mujoco` bindings share (`offline_rl.envs.maze2d`,
`offline_rl.envs.antmaze`): a model compiled from MJCF text, setting a state, a top-down
offscreen render, and registration that can run at every import."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from offline_rl.envs.mujoco import keep_classic_margins

RENDER_SIZE = 480  # gymnasium's MuJoCo envs' default frame


class RebuiltMujocoEnv(gym.Env):
    """A gymnasium env around one MuJoCo model; subclasses step it as D4RL's env does and say where
    the camera looks from (`top_down_view`)."""

    def __init__(self, model_xml: str, render_mode: str | None) -> None:
        import mujoco  # heavy (MuJoCo): loaded only when used

        self._mujoco = mujoco
        self.render_mode = render_mode
        self.model = mujoco.MjModel.from_xml_string(model_xml)
        self.data = mujoco.MjData(self.model)
        self._renderer: Any = None
        keep_classic_margins(self)  # D4RL's contacts, also where this MuJoCo adds margins up

    def set_state(self, qpos: np.ndarray, qvel: np.ndarray) -> None:
        self.data.qpos[:] = qpos
        self.data.qvel[:] = qvel
        self._mujoco.mj_forward(self.model, self.data)

    def top_down_view(self) -> tuple[np.ndarray, float, float]:
        """(the point looked at, the camera's distance from it, its azimuth) of a view from above."""
        raise NotImplementedError

    def render(self) -> Any:
        if self._renderer is None:
            from gymnasium.envs.mujoco.mujoco_rendering import MujocoRenderer  # heavy (MuJoCo): loaded only when used

            lookat, distance, azimuth = self.top_down_view()
            camera = {"lookat": lookat, "distance": distance, "elevation": -90.0, "azimuth": azimuth}
            self._renderer = MujocoRenderer(self.model, self.data, camera, RENDER_SIZE, RENDER_SIZE)
        return self._renderer.render(self.render_mode)

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None


def layout_cells(layout: tuple[str, ...], kind: str) -> list[tuple[int, int]]:
    """The (row, column) of every cell of one kind (`#`, `G`, ...) in a maze layout, in row-major order."""
    return [(i, j) for i, row in enumerate(layout) for j, cell in enumerate(row) if cell == kind]


def register_once(env_id: str, entry_point: str, max_episode_steps: int, **kwargs: Any) -> None:
    """`gymnasium.register`, skipped for an id already registered (the modules register at import)."""
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=entry_point, max_episode_steps=max_episode_steps, kwargs=kwargs)
