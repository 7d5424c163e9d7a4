"""D4RL's Maze2D envs (`D4RL/maze2d-*-v1`), rebuilt on the `mujoco` bindings.

The references: D4RL's `maze_model.py` (layouts, the ball's frame, starts, step, rewards), its registered
time limits, and its reference returns, which D4RL's own procedures reproduce here when replayed with
D4RL's random streams (`benchmarks/maze2d_reference_returns.py`)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from conftest import load_benchmark, rendered_frame_summary
from offline_rl.envs.d4rl_catalogue import d4rl_gymnasium_task, d4rl_names
from offline_rl.envs.make import make_env
from offline_rl.envs.maze2d import MAZE2D_LAYOUTS, REWARD_TYPES, d4rl_maze2d_id, maze2d_of

STEPS = {"umaze": 300, "medium": 600, "large": 800}  # D4RL's v1 registrations


@pytest.mark.parametrize("maze", list(MAZE2D_LAYOUTS))
@pytest.mark.parametrize("reward_type", REWARD_TYPES)
def test_each_maze_and_reward_has_d4rls_id_spaces_and_time_limit(maze: str, reward_type: str) -> None:
    env_id = d4rl_maze2d_id(maze, reward_type)
    assert env_id == f"D4RL/maze2d-{maze}{'-dense' if reward_type == 'dense' else ''}-v1"
    env = make_env(env_id)
    assert env.spec.max_episode_steps == STEPS[maze]
    assert env.observation_space.shape == (4,) and env.action_space.shape == (2,)
    np.testing.assert_array_equal(env.action_space.low, [-1, -1])
    assert maze2d_of(env_id) == (maze, reward_type) and maze2d_of("PointMaze_UMaze-v3") is None
    dataset = env_id.removeprefix("D4RL/")  # D4RL's env id is its dataset's name
    assert dataset in d4rl_names() and d4rl_gymnasium_task(dataset) == env_id


def test_d4rls_reference_procedures_give_d4rls_reference_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    """100 random and 100 waypoint-controller episodes on the U-maze, with D4RL's seeds and gym's old
    seeding: the returns D4RL measured on its mujoco-py env (23.85, 161.86), within what MuJoCo's
    versions change in 30 000 contact-rich steps. A goal radius of 0.45 (PointMaze's) instead of 0.5
    gives 21.6 and 161.4; the ball's joints at the cell centres instead of 0.2 off them, 37.1."""
    procedures = load_benchmark("maze2d_reference_returns", monkeypatch)
    env_id = d4rl_maze2d_id("umaze")
    assert procedures.random_reference_return(env_id) == pytest.approx(23.85, abs=0.5)
    assert procedures.expert_reference_return(env_id) == pytest.approx(161.86, abs=0.2)


def umaze(reward_type: str = "sparse") -> gym.Env:
    env = make_env(d4rl_maze2d_id("umaze", reward_type))
    env.reset(seed=0)
    return env


def test_episodes_start_in_a_cell_drawn_among_the_empty_ones_and_the_goals() -> None:
    """D4RL's `reset_model`: a cell uniformly among the 6 empty cells and the goal's (the U-maze's 7), its
    (row, column) as qpos plus U(-0.1, 0.1), and qvel ~ N(0, 0.1²); the goal itself does not move."""
    env = make_env(d4rl_maze2d_id("umaze"))
    cells = {(1, 1), (1, 2), (1, 3), (2, 3), (3, 1), (3, 2), (3, 3)}
    seen, speeds = set(), []
    for seed in range(200):
        observation, _ = env.reset(seed=seed)
        cell = tuple(int(v) for v in np.rint(observation[:2]))
        assert cell in cells and np.abs(observation[:2] - cell).max() <= 0.1
        seen.add(cell)
        speeds.append(observation[2:])
        np.testing.assert_array_equal(env.unwrapped.target, [1, 1])
    assert seen == cells
    assert np.std(speeds) == pytest.approx(0.1, rel=0.15)


@pytest.mark.parametrize(
    ("offset", "sparse"), [((-0.3, -0.3), 1.0), ((-0.4, -0.4), 0.0)]
)  # the goal lies 0.2 off its cell centre towards +x, +y
def test_rewards_are_one_within_half_a_cell_of_the_goal_or_the_exponential_of_minus_the_distance(
    offset: tuple[float, float], sparse: float
) -> None:
    for reward_type, expected in (("sparse", sparse), ("dense", np.exp(-np.hypot(*offset)))):
        env = umaze(reward_type)
        env.unwrapped.set_state(np.array([1.0, 1.0]) + offset, np.zeros(2))
        observation, reward, terminated, truncated, _ = env.step(np.zeros(2, np.float32))
        np.testing.assert_allclose(observation, [1.0 + offset[0], 1.0 + offset[1], 0.0, 0.0], atol=1e-12)
        assert reward == pytest.approx(expected) and not terminated and not truncated


def test_walls_stand_where_d4rl_puts_them_relative_to_the_balls_frame() -> None:
    """From the goal, cell (1, 1), pushing towards the wall cell (1, 0): D4RL's ball body sits at world
    (1.2, 1.2) and the wall block spans world y up to 1.5, so the 0.1 m ball stops at qpos y ≈ 0.4;
    pushing along the open row instead, it runs on."""
    env = umaze()
    env.unwrapped.set_state(np.array([1.0, 1.0]), np.zeros(2))
    for _ in range(100):
        observation, *_ = env.step(np.array([0.0, -1.0], np.float32))
    assert observation[1] == pytest.approx(0.4, abs=0.02) and observation[0] == pytest.approx(1.0, abs=1e-6)
    env.unwrapped.set_state(np.array([1.0, 1.0]), np.zeros(2))
    for _ in range(40):
        observation, *_ = env.step(np.array([0.0, 1.0], np.float32))
    assert observation[1] > 2.5


def test_actions_are_clipped_and_speeds_held_to_five() -> None:
    env = umaze()
    env.unwrapped.set_state(np.array([3.0, 2.0]), np.array([0.0, 30.0]))
    observation, *_ = env.step(np.zeros(2, np.float32))
    assert abs(observation[3]) <= 5.0  # clipped before the step, then only damped
    env.unwrapped.set_state(np.array([3.0, 2.0]), np.zeros(2))
    pushed, *_ = env.step(np.array([0.0, 1.0], np.float32))
    env.unwrapped.set_state(np.array([3.0, 2.0]), np.zeros(2))
    overpushed, *_ = env.step(np.array([0.0, 7.0], np.float32))
    np.testing.assert_array_equal(pushed, overpushed)
    assert pushed[3] == pytest.approx(100 * 0.01 / (1000 * 4 / 3 * np.pi * 0.1**3), rel=0.01)  # gear 100 on 4.19 kg


def test_the_episode_runs_to_d4rls_time_limit_without_terminating() -> None:
    env = umaze()
    steps, done = 0, False
    while not done:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        assert not terminated
        steps, done = steps + 1, truncated
    assert steps == 300


def test_the_maze_renders_from_above(tmp_path) -> None:
    """An rgb_array frame (offscreen through EGL, as MuJoCo renders without a display): the ball, the
    goal's marker and the walls are drawn, so the frame is not one colour."""
    assert rendered_frame_summary("D4RL/maze2d-medium-v1") == "(480, 480, 3) True"


def test_a_maze2d_name_given_as_task_is_told_it_is_a_dataset_without_gymnasiums_spelling_guess() -> None:
    from offline_rl.core.errors import OfflineRLError

    with pytest.raises(OfflineRLError) as error:
        make_env("maze2d-large-dense-v1")
    assert str(error.value) == (
        "--task 'maze2d-large-dense-v1': Environment `maze2d-large-dense` doesn't exist; maze2d-large-dense-v1 "
        "is a D4RL dataset: --dataset maze2d-large-dense-v1, which evaluates on D4RL/maze2d-large-dense-v1"
    )
