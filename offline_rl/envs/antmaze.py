"""D4RL's AntMaze envs (an ant robot in a maze), rebuilt on the `mujoco` bindings.

D4RL recorded its AntMaze datasets on its own `AntMazeEnv` (`d4rl/locomotion/ant.py` and
`maze_env.py`, mujoco-py), which gymnasium does not have. Gymnasium-Robotics' AntMaze is a port with
another robot (gymnasium's Ant: gear 150, 0.01 s steps) and other conventions (a centred frame, the
goal in a dict observation), so a policy trained on D4RL's 29 numbers cannot be scored there. This
module builds D4RL's model from the same description and steps it as D4RL's evaluation ids do:

- the robot is D4RL's own ant (`d4rl/locomotion/assets/ant.xml`): motors of gear 1 and range ±30 that
  the policy's [-1, 1] actions are scaled onto (D4RL's `NormalizedBoxEnv`), 0.02 s RK4 steps, five
  per env step;
- the maze is D4RL's `*_TEST` layout in 4 × 4 × 1 m blocks, placed so that the start cell's centre
  is the origin: cell (row i, column j) is centred at (x, y) = (4j − 4, 4i − 4);
- the observation is the ant's qpos (15, the torso's x and y included) and qvel (14), as D4RL's
  `expose_all_qpos=True` without the goal (its `eval=True`);
- an episode starts at the origin, qpos ± U(0.1) on every coordinate, qvel ~ N(0, 0.1²);
- the goal lies in the layout's goal cell, offset by U(0, 1) + U(0, 0.5) on each axis (D4RL's
  `goal_sampler`); the v2 ids draw it at every reset, the v0 ids (D4RL's v0 and v1 envs) once per
  env, at its first reset;
- the reward is 1 within 0.5 of the goal, where the episode terminates; otherwise 0 until the time
  limit (700 steps in the U-maze, 1000 in the others) truncates it. The ant's own falls do not end an
  episode (D4RL's goal-reaching step drops them).

What is not D4RL's: the physics engine is today's MuJoCo, not the MuJoCo 2.1 under mujoco-py. The
compiled model equals D4RL's field by field, contacts keep D4RL's margin on MuJoCo 3.5+
(`offline_rl.envs.mujoco`), and one step agrees with MuJoCo 2.3.1-3.4.0 to float rounding
(`benchmarks/mujoco_physics.py`).
`D4RL/antmaze-umaze-v2` ... `D4RL/antmaze-large-v0` are registered when `offline_rl.envs.make` is imported.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from offline_rl.envs.maze2d import MAZE2D_LAYOUTS
from offline_rl.envs.rebuilt import RebuiltMujocoEnv, layout_cells, register_once


def _started_top_left(layout: tuple[str, ...]) -> tuple[str, ...]:
    """A maze with its start in the first open cell, row 1 and column 1, where D4RL's AntMaze puts it."""
    return (layout[0], layout[1][0] + "R" + layout[1][2:], *layout[2:])


ANTMAZE_LAYOUTS = {
    "umaze": ("#####", "#ROO#", "###O#", "#GOO#", "#####"),
    "medium": _started_top_left(MAZE2D_LAYOUTS["medium"]),
    "large": _started_top_left(MAZE2D_LAYOUTS["large"]),
}
"""D4RL's evaluation layouts (`U_MAZE_TEST`, `BIG_MAZE_TEST`, `HARDEST_MAZE_TEST`): `#` a block, `R`
the start, `G` the goal, `O` empty. The medium and large ones are D4RL's Maze2D mazes, goal included,
with the start added; the U-maze starts where Maze2D's has its goal, and has its own at the U's other
end. Every AntMaze dataset name of a maze (umaze and umaze-diverse, medium-play and medium-diverse, ...)
and every version evaluates on its maze's layout."""
ANTMAZE_EPISODE_STEPS = {"umaze": 700, "medium": 1000, "large": 1000}
"""D4RL's time limits (`d4rl/locomotion/__init__.py`), every version alike."""
GOAL_RESETS = {"v2": "episode", "v0": "env"}
"""When the goal is drawn: D4RL's v2 ids at every reset (`v2_resets`), its v0 and v1 ids once per env."""
CELL_SIZE = 4.0
BLOCK_HEIGHT = 2.0  # D4RL's maze_height 0.5 × maze_size_scaling 4
GOAL_RADIUS = 0.5
GOAL_CELL_NOISE = 1.0  # U(0, scaling/4), then U(0, 0.5) × scaling/4 more: D4RL's two offsets
GOAL_EXTRA_NOISE = 0.5
TORQUE_LIMIT = 30.0
FRAME_SKIP = 5
START_NOISE = 0.1
VELOCITY_NOISE = 0.1
ANT_QPOS = 15  # the torso's free joint (7) and 8 hinges
ANT_QVEL = 14
START_HEIGHT = 0.75

# The ant's four legs: (name suffix, direction of its hip in the torso's plane, ankle axis, ankle range in degrees)
_LEGS = (
    ("1", (1, 1), "-1 1 0", "30 70"),
    ("2", (-1, 1), "1 1 0", "-70 -30"),
    ("3", (-1, -1), "-1 1 0", "-70 -30"),
    ("4", (1, -1), "1 1 0", "30 70"),
)
_MOTOR_ORDER = ("hip_4", "ankle_4", "hip_1", "ankle_1", "hip_2", "ankle_2", "hip_3", "ankle_3")
"""The actuators' order in D4RL's model, which is the order of a D4RL action's 8 numbers."""


def d4rl_antmaze_id(maze: str, version: str = "v2") -> str:
    """`D4RL/antmaze-umaze-v2`: the maze's evaluation env, goal drawn per episode (v2) or per env (v0)."""
    return f"D4RL/antmaze-{maze}-{version}"


def antmaze_model_xml(layout: tuple[str, ...]) -> str:
    """The MJCF model D4RL's `MazeEnv` writes for a layout: its ant (a 0.25 m sphere torso on a free joint,
    four two-segment capsule legs with hinge hips of ±30° and ankles of 30°–70°, damping and armature 1,
    density 5, soft contacts of margin 0.01) and one block per `#`, offset so that the start cell's centre
    is the origin. Every geom has D4RL's margin of 0.01, which MuJoCo 3.5+ would double at each contact
    but for `offline_rl.envs.mujoco`."""
    start_row, start_column = layout_cells(layout, "R")[0]
    blocks = "\n".join(
        f'    <geom name="block_{i}_{j}" type="box" pos="{j * CELL_SIZE - start_column * CELL_SIZE} '
        f'{i * CELL_SIZE - start_row * CELL_SIZE} {BLOCK_HEIGHT / 2}" size="{CELL_SIZE / 2} {CELL_SIZE / 2} '
        f'{BLOCK_HEIGHT / 2}" contype="1" conaffinity="1" rgba="0.7 0.5 0.3 1"/>'
        for i, row in enumerate(layout)
        for j, cell in enumerate(row)
        if cell == "#"
    )
    legs = "\n".join(_leg_xml(*leg) for leg in _LEGS)
    motors = "\n".join(
        f'    <motor joint="{joint}" ctrlrange="{-TORQUE_LIMIT} {TORQUE_LIMIT}" ctrllimited="true"/>'
        for joint in _MOTOR_ORDER
    )
    return f"""<mujoco model="ant_maze">
  <compiler inertiafromgeom="true" angle="degree"/>
  <option timestep="0.02" integrator="RK4"/>
  <default>
    <joint limited="true" armature="1" damping="1"/>
    <geom condim="3" conaffinity="0" margin="0.01" friction="1 0.5 0.5" solref=".02 1" solimp=".8 .8 .01"
          rgba="0.8 0.6 0.4 1" density="5.0"/>
  </default>
  <asset>
    <texture name="grid" type="2d" builtin="checker" rgb1="0.2 0.3 0.4" rgb2="0.1 0.2 0.3" width="100" height="100"/>
    <material name="ground" texture="grid" texrepeat="60 60"/>
  </asset>
  <worldbody>
    <light directional="true" diffuse="1 1 1" specular=".1 .1 .1" pos="0 0 1.3" dir="0 0 -1.3"/>
    <geom name="floor" type="plane" pos="0 0 0" size="40 40 40" conaffinity="1" condim="3" rgba="0.8 0.9 0.8 1"
          material="ground"/>
    <body name="torso" pos="0 0 {START_HEIGHT}">
      <geom name="torso_geom" type="sphere" size="0.25" pos="0 0 0" rgba="0.3 0.9 0.5 1"/>
      <joint name="root" type="free" limited="false" pos="0 0 0" axis="0 0 1" margin="0.01" armature="0" damping="0"/>
{legs}
    </body>
{blocks}
  </worldbody>
  <actuator>
{motors}
  </actuator>
</mujoco>
"""


def _leg_xml(suffix: str, direction: tuple[int, int], ankle_axis: str, ankle_range: str) -> str:
    """One leg: a 0.28 m hip segment from the torso's centre, a hinge about z, a thigh of the same
    length, a hinge about the horizontal axis across the leg, and a foot twice as long."""
    dx, dy = 0.2 * direction[0], 0.2 * direction[1]
    return f"""      <body name="leg_{suffix}" pos="0 0 0">
        <geom name="hip_{suffix}_geom" type="capsule" size="0.08" fromto="0 0 0 {dx} {dy} 0"/>
        <body name="thigh_{suffix}" pos="{dx} {dy} 0">
          <joint name="hip_{suffix}" type="hinge" pos="0 0 0" axis="0 0 1" range="-30 30"/>
          <geom name="thigh_{suffix}_geom" type="capsule" size="0.08" fromto="0 0 0 {dx} {dy} 0"/>
          <body name="foot_{suffix}" pos="{dx} {dy} 0">
            <joint name="ankle_{suffix}" type="hinge" pos="0 0 0" axis="{ankle_axis}" range="{ankle_range}"/>
            <geom name="foot_{suffix}_geom" type="capsule" size="0.08" fromto="0 0 0 {2 * dx} {2 * dy} 0"/>
          </body>
        </body>
      </body>"""


def cell_centre(layout: tuple[str, ...], row: int, column: int) -> np.ndarray:
    """The (x, y) of a cell's centre in the ant's frame (the start cell's centre is the origin)."""
    start_row, start_column = layout_cells(layout, "R")[0]
    return np.array([(column - start_column) * CELL_SIZE, (row - start_row) * CELL_SIZE])


class D4RLAntMaze(RebuiltMujocoEnv):
    """D4RL's `AntMazeEnv` for one maze, as its evaluation ids (`eval=True`, sparse reward) configure it."""

    metadata = {"render_modes": ["human", "rgb_array", "depth_array"], "render_fps": 10}  # noqa: RUF012

    def __init__(self, maze: str = "umaze", goal_reset: str = "episode", render_mode: str | None = None) -> None:
        if maze not in ANTMAZE_LAYOUTS or goal_reset not in GOAL_RESETS.values():
            expected = f"{tuple(ANTMAZE_LAYOUTS)}, {tuple(GOAL_RESETS.values())}"
            raise ValueError(f"maze {maze!r}, goal reset {goal_reset!r}: expected {expected}")
        super().__init__(antmaze_model_xml(ANTMAZE_LAYOUTS[maze]), render_mode)
        self.maze, self.goal_reset, self.layout = maze, goal_reset, ANTMAZE_LAYOUTS[maze]
        self.goal_cell = cell_centre(self.layout, *layout_cells(self.layout, "G")[0])
        self.target: np.ndarray | None = None
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (ANT_QPOS + ANT_QVEL,), np.float64)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (len(_MOTOR_ORDER),), np.float32)

    def draw_goal(self) -> np.ndarray:
        """D4RL's goal: the goal cell's centre, plus U(0, 1) and then U(0, 0.5) on each axis, at least 0."""
        offset = self.np_random.uniform(0.0, GOAL_CELL_NOISE, 2)
        offset = offset + self.np_random.uniform(0.0, 1.0, 2) * GOAL_EXTRA_NOISE
        return np.maximum(self.goal_cell + offset, 0.0)

    def observation(self) -> np.ndarray:
        return np.concatenate([self.data.qpos[:ANT_QPOS], self.data.qvel[:ANT_QVEL]])

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if self.target is None or self.goal_reset == "episode" or seed is not None:
            self.target = self.draw_goal()
        self._mujoco.mj_resetData(self.model, self.data)
        qpos = self.model.qpos0 + self.np_random.uniform(-START_NOISE, START_NOISE, self.model.nq)
        self.set_state(qpos, self.np_random.standard_normal(self.model.nv) * VELOCITY_NOISE)
        return self.observation(), {"goal": self.target.copy()}

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        assert self.target is not None, "reset() before step()"
        torque = np.clip(np.asarray(action, dtype=np.float64) * TORQUE_LIMIT, -TORQUE_LIMIT, TORQUE_LIMIT)
        self.data.ctrl[:] = torque
        self._mujoco.mj_step(self.model, self.data, nstep=FRAME_SKIP)
        observation = self.observation()
        reached = bool(np.linalg.norm(observation[:2] - self.target) <= GOAL_RADIUS)
        if self.render_mode == "human":
            self.render()
        return observation, float(reached), reached, False, {"goal": self.target.copy(), "success": reached}

    def top_down_view(self) -> tuple[np.ndarray, float, float]:
        rows, columns = len(self.layout), len(self.layout[0])
        middle = cell_centre(self.layout, (rows - 1) / 2, (columns - 1) / 2)
        return np.array([*middle, 0.0]), 1.3 * CELL_SIZE * max(rows, columns), 90.0  # rows up, as D4RL's y


def antmaze_of(env_id: str) -> tuple[str, str] | None:
    """(maze, version) for `D4RL/antmaze-medium-v2`; None for other ids."""
    for maze in ANTMAZE_LAYOUTS:
        for version in GOAL_RESETS:
            if env_id == d4rl_antmaze_id(maze, version):
                return maze, version
    return None


def register_d4rl_antmaze() -> None:
    """Register the six `D4RL/antmaze-*` ids (idempotent; makes nothing until an env is made)."""
    for maze, steps in ANTMAZE_EPISODE_STEPS.items():
        for version, goal_reset in GOAL_RESETS.items():
            entry_point = f"{__name__}:D4RLAntMaze"
            register_once(d4rl_antmaze_id(maze, version), entry_point, steps, maze=maze, goal_reset=goal_reset)
