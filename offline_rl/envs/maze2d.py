"""D4RL's Maze2D envs (a point mass in a maze), rebuilt on the `mujoco` bindings.

D4RL recorded its Maze2D datasets and measured their reference returns on its own `MazeEnv`
(`d4rl/pointmaze/maze_model.py`, mujoco-py), which gymnasium does not have. Gymnasium-Robotics'
PointMaze is a port with other conventions (a centred frame, the goal in the observation, success
within 0.45), so a policy trained on D4RL's (x, y, vx, vy) cannot be scored there. This module builds
D4RL's model from the same description and steps it as D4RL's env does:

- the ball's observation is its joints' (qpos, qvel), and the joints sit 0.2 from the first cell's
  centre, so cell (i, j) of the layout is qpos ≈ (i − 0.2, j − 0.2) and the goal, qpos = the goal
  cell's (i, j), lies 0.2 off its cell's centre towards the walls, as in D4RL;
- an episode starts in a cell drawn uniformly among the empty cells and the goal's, qpos ± U(0.1),
  qvel ~ N(0, 0.1²); the goal stays where the layout puts it (D4RL's evaluation ids, `reset_target`
  False);
- a step clips the action to [-1, 1] and the velocity to [-5, 5], then advances 0.01 s (Euler);
- the sparse reward is 1 within 0.5 of the goal, the dense one exp(−distance); nothing terminates,
  the time limit (300, 600, 800 steps by maze) truncates.

Checked where it counts (`benchmarks/maze2d_reference_returns.py`): D4RL's own reference procedures,
run here with D4RL's random streams, give its reference returns.
`D4RL/maze2d-umaze-v1` (sparse) to `D4RL/maze2d-large-dense-v1`, the ids of D4RL's envs under a
`D4RL/` prefix, are registered when `offline_rl.envs.make` is imported.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from offline_rl.envs.rebuilt import RebuiltMujocoEnv, layout_cells, register_once

MAZE2D_LAYOUTS = {
    "umaze": ("#####", "#GOO#", "###O#", "#OOO#", "#####"),
    "medium": ("########", "#OO##OO#", "#OO#OOO#", "##OOO###", "#OO#OOO#", "#O#OO#O#", "#OOO#OG#", "########"),
    "large": (
        "############",
        "#OOOO#OOOOO#",
        "#O##O#O#O#O#",
        "#OOOOOO#OOO#",
        "#O####O###O#",
        "#OO#O#OOOOO#",
        "##O#O#O#O###",
        "#OO#OOO#OGO#",
        "############",
    ),
}
"""D4RL's maze layouts (`U_MAZE`, `MEDIUM_MAZE`, `LARGE_MAZE`): row i, column j is cell (i, j); `#` a
wall, `G` the goal, `O` empty."""
MAZE2D_EPISODE_STEPS = {"umaze": 300, "medium": 600, "large": 800}
"""D4RL's time limits of the v1 ids (`d4rl/pointmaze/__init__.py`)."""
REWARD_TYPES = ("sparse", "dense")
JOINT_ORIGIN = 1.2
"""Where D4RL puts the ball's body: qpos (0, 0) is world (1.2, 1.2); cell (i, j) is centred at world (i + 1, j + 1)."""
GOAL_RADIUS = 0.5
MAX_SPEED = 5.0
CELL_NOISE = 0.1
VELOCITY_NOISE = 0.1


def d4rl_maze2d_id(maze: str, reward_type: str = "sparse") -> str:
    """`D4RL/maze2d-umaze-v1` (sparse) or `D4RL/maze2d-umaze-dense-v1`: D4RL's env id, prefixed."""
    return f"D4RL/maze2d-{maze}{'-dense' if reward_type == 'dense' else ''}-v1"


def maze2d_model_xml(layout: tuple[str, ...]) -> str:
    """The MJCF model D4RL's `point_maze` builds for a layout: a 0.1 m sphere of density 1000 on two
    damped slide joints, driven by two motors of gear 100, between 1 × 1 wall blocks; no gravity,
    frictionless one-dimensional contacts of margin 0.002 (kept so on MuJoCo 3.5+:
    `offline_rl.envs.mujoco`), 0.01 s Euler steps with 20 solver iterations. The goal's marker is
    drawn where the reward is centred (D4RL draws it 0.2 off, at qpos + 1): it is only drawn."""
    walls = "\n".join(
        f'    <geom type="box" name="wall_{i}_{j}" pos="{i + 1} {j + 1} 0" size="0.5 0.5 0.2" material="wall"/>'
        for i, row in enumerate(layout)
        for j, cell in enumerate(row)
        if cell == "#"
    )
    goal = layout_cells(layout, "G")[0]
    return f"""<mujoco model="point_maze">
  <compiler inertiafromgeom="true" angle="radian"/>
  <option timestep="0.01" gravity="0 0 0" iterations="20" integrator="Euler"/>
  <default>
    <joint damping="1" limited="false"/>
    <geom friction=".5 .1 .1" density="1000" margin="0.002" condim="1" contype="2" conaffinity="1"/>
  </default>
  <asset>
    <texture name="grid" type="2d" builtin="checker" rgb1="0.2 0.3 0.4" rgb2="0.1 0.2 0.3" width="100" height="100"/>
    <material name="ground" texture="grid" texrepeat="20 20"/>
    <material name="wall" rgba=".7 .5 .3 1"/>
    <material name="target" rgba=".6 .3 .3 1"/>
  </asset>
  <worldbody>
    <geom name="ground" type="plane" size="40 40 0.25" pos="0 0 -0.1" contype="1" conaffinity="0" material="ground"/>
    <body name="particle" pos="{JOINT_ORIGIN} {JOINT_ORIGIN} 0">
      <geom name="particle_geom" type="sphere" size="0.1" contype="1" rgba="0 0 1 1"/>
      <joint name="ball_x" type="slide" pos="0 0 0" axis="1 0 0"/>
      <joint name="ball_y" type="slide" pos="0 0 0" axis="0 1 0"/>
    </body>
    <site name="target_site" pos="{goal[0] + JOINT_ORIGIN} {goal[1] + JOINT_ORIGIN} 0" size="0.2" material="target"/>
{walls}
  </worldbody>
  <actuator>
    <motor joint="ball_x" ctrlrange="-1 1" ctrllimited="true" gear="100"/>
    <motor joint="ball_y" ctrlrange="-1 1" ctrllimited="true" gear="100"/>
  </actuator>
</mujoco>
"""


class D4RLMaze2D(RebuiltMujocoEnv):
    """D4RL's `MazeEnv` for one maze and reward type, as its v1 evaluation ids configure it."""

    metadata = {"render_modes": ["human", "rgb_array", "depth_array"], "render_fps": 100}  # noqa: RUF012

    def __init__(self, maze: str = "umaze", reward_type: str = "sparse", render_mode: str | None = None) -> None:
        if maze not in MAZE2D_LAYOUTS or reward_type not in REWARD_TYPES:
            raise ValueError(f"maze {maze!r}, reward {reward_type!r}: expected {tuple(MAZE2D_LAYOUTS)}, {REWARD_TYPES}")
        layout = MAZE2D_LAYOUTS[maze]
        super().__init__(maze2d_model_xml(layout), render_mode)
        self.maze, self.reward_type = maze, reward_type
        self.target = np.array(layout_cells(layout, "G")[0], dtype=np.float64)
        # D4RL's start cells: the empty ones in row-major order, then the goal's
        self.start_cells = np.array(layout_cells(layout, "O") + layout_cells(layout, "G"), dtype=np.float64)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float64)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def observation(self) -> np.ndarray:
        return np.concatenate([self.data.qpos, self.data.qvel])

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._mujoco.mj_resetData(self.model, self.data)
        cell = self.start_cells[self.np_random.integers(len(self.start_cells))]
        qpos = cell + self.np_random.uniform(-CELL_NOISE, CELL_NOISE, 2)
        self.set_state(qpos, self.np_random.standard_normal(2) * VELOCITY_NOISE)
        return self.observation(), {}

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        self.set_state(self.data.qpos.copy(), np.clip(self.data.qvel, -MAX_SPEED, MAX_SPEED))
        self.data.ctrl[:] = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        self._mujoco.mj_step(self.model, self.data)
        observation = self.observation()
        distance = float(np.linalg.norm(observation[:2] - self.target))
        reward = float(distance <= GOAL_RADIUS) if self.reward_type == "sparse" else float(np.exp(-distance))
        if self.render_mode == "human":
            self.render()
        return observation, reward, False, False, {}

    def top_down_view(self) -> tuple[np.ndarray, float, float]:
        rows, columns = len(MAZE2D_LAYOUTS[self.maze]), len(MAZE2D_LAYOUTS[self.maze][0])
        return np.array([rows / 2 + 0.5, columns / 2 + 0.5, 0.0]), 1.6 * max(rows, columns), 180.0  # rows down


def maze2d_of(env_id: str) -> tuple[str, str] | None:
    """(maze, reward type) for `D4RL/maze2d-umaze-dense-v1`; None for other ids."""
    for maze in MAZE2D_LAYOUTS:
        for reward_type in REWARD_TYPES:
            if env_id == d4rl_maze2d_id(maze, reward_type):
                return maze, reward_type
    return None


def register_d4rl_maze2d() -> None:
    """Register the six `D4RL/maze2d-*-v1` ids (idempotent; makes nothing until an env is made)."""
    for maze, steps in MAZE2D_EPISODE_STEPS.items():
        for reward_type in REWARD_TYPES:
            entry_point = f"{__name__}:D4RLMaze2D"
            register_once(d4rl_maze2d_id(maze, reward_type), entry_point, steps, maze=maze, reward_type=reward_type)
