"""D4RL's Maze2D reference returns, reproduced on `D4RL/maze2d-*-v1` with D4RL's own procedures and streams.

    python benchmarks/maze2d_reference_returns.py [--mazes umaze medium large] [--rewards sparse dense]

D4RL's normalised score puts 0 at REF_MIN_SCORE and 100 at REF_MAX_SCORE. For Maze2D, D4RL measured
them on its mujoco-py `MazeEnv` with two scripts (`scripts/reference_scores/generate_ref_min_score.py`
and `maze2d_controller.py`): 100 episodes of a uniform-random policy, and 100 of its waypoint
controller, each run to the time limit. Both seed everything with 0 under gym < 0.22, whose
`seeding.np_random` hashes the seed with SHA-512 into a legacy `RandomState`: the env's starts
(`env.seed(0)`), the random actions (`action_space.seed(0)`) and the waypoints' jitter
(`np.random.seed(0)`). Replaying those same streams on the rebuilt env (`offline_rl.envs.maze2d`)
gives the same episodes, so the returns must land on D4RL's figures, not merely near them: a check
of the model, the start distribution, the step and the reward at once. A correctness check of the
evaluation env, not a timing.

The controller is D4RL's as its script uses it: one controller for all episodes. It plans a path
(shortest over the grid, each waypoint but the goal less U(0, 0.2) per axis) only when the target
changes, i.e. in the first episode; every later episode steers straight at the goal with the same
PD gains (10, −1) and stays where a wall stops it. That is where D4RL's expert returns come from.
"""

from __future__ import annotations

import offline_rl  # noqa: F401  first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

import argparse
import collections

import gymnasium as gym
import numpy as np
from d4rl_streams import legacy_gym_random_state, uniform_actions

from offline_rl.envs.make import make_env
from offline_rl.envs.maze2d import CELL_NOISE, MAZE2D_LAYOUTS, REWARD_TYPES, VELOCITY_NOISE, d4rl_maze2d_id
from offline_rl.envs.scores import reference_scores

EPISODES = 100  # D4RL's --num_episodes default in both scripts
MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))


class D4RLStarts:
    """D4RL's `reset_model`, drawn from a legacy RandomState: a start cell uniformly among the empty
    cells and the goal's, qpos ± U(0.1), qvel ~ N(0, 0.1²)."""

    def __init__(self, env: gym.Env, seed: int = 0) -> None:
        self.maze = env.unwrapped
        self.random = legacy_gym_random_state(seed)

    def reset(self, env: gym.Env) -> np.ndarray:
        env.reset()  # the time limit's counter and the simulator's data; the start is D4RL's, set next
        cells = self.maze.start_cells
        cell = cells[self.random.choice(len(cells))]
        qpos = cell + self.random.uniform(low=-CELL_NOISE, high=CELL_NOISE, size=2)
        qvel = self.random.randn(2) * VELOCITY_NOISE
        self.maze.set_state(qpos, qvel)
        return self.maze.observation()


class WaypointController:
    """D4RL's `WaypointController` (solve threshold 0.1, gains 10 and −1), planning by breadth-first
    search where D4RL runs Q-iteration on the same grid: both follow a shortest path."""

    def __init__(self, layout: tuple[str, ...], jitter: np.random.RandomState) -> None:
        self.layout, self.jitter = layout, jitter
        self.target = np.zeros(2)  # D4RL starts from zeros (its ONES constant is np.zeros)
        self.waypoints: list[np.ndarray] = []
        self.index = 0
        self.previous = np.zeros(2)

    def _plan(self, start: np.ndarray, target: np.ndarray) -> None:
        begin, goal = tuple(int(v) for v in np.rint(start)), tuple(int(v) for v in np.rint(target))
        steps_to_goal = {goal: 0}
        frontier = collections.deque([goal])
        while frontier:
            cell = frontier.popleft()
            for move in MOVES:
                step = (cell[0] + move[0], cell[1] + move[1])
                if self.layout[step[0]][step[1]] != "#" and step not in steps_to_goal:
                    steps_to_goal[step] = steps_to_goal[cell] + 1
                    frontier.append(step)
        self.waypoints, cell = [], begin
        while cell != goal:
            cell = min(((cell[0] + dx, cell[1] + dy) for dx, dy in MOVES), key=lambda c: steps_to_goal.get(c, 1 << 30))
            waypoint = np.array(cell, dtype=np.float64)
            self.waypoints.append(waypoint if cell == goal else waypoint - self.jitter.uniform(size=(2,)) * 0.2)
        self.index, self.previous, self.target = 0, np.array(begin, dtype=np.float64), np.array(goal, np.float64)

    def act(self, observation: np.ndarray, target: np.ndarray) -> np.ndarray:
        position, velocity = observation[:2], observation[2:4]
        if np.linalg.norm(self.target - np.round(target)) > 1e-3:
            self._plan(position, target)
        moved = np.linalg.norm(self.previous - position)
        solved = np.linalg.norm(position - self.target) < 0.1 and moved < 0.1
        aim = self.target if solved else self.waypoints[self.index]
        if not solved and np.linalg.norm(position - aim) < 0.1 and moved < 0.1:
            self.index += 1
        self.previous = position
        return np.clip(10.0 * (aim - position) - 1.0 * velocity, -1.0, 1.0)


def random_reference_return(env_id: str, episodes: int = EPISODES) -> float:
    """`generate_ref_min_score.py`: the mean return of `episodes` uniform-random episodes."""
    env = make_env(env_id)
    starts, actions = D4RLStarts(env), legacy_gym_random_state(0)
    returns = []
    for _ in range(episodes):
        starts.reset(env)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(uniform_actions(actions, env.action_space))
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def expert_reference_return(env_id: str, episodes: int = EPISODES) -> float:
    """`maze2d_controller.py`: the mean return of `episodes` episodes of one waypoint controller."""
    env = make_env(env_id)
    starts = D4RLStarts(env)
    # the jitter comes from np.random.seed(0): a plain legacy seed, not gym's hashed one
    controller = WaypointController(MAZE2D_LAYOUTS[env.unwrapped.maze], np.random.RandomState(0))
    returns = []
    for _ in range(episodes):
        observation = starts.reset(env)
        total, done = 0.0, False
        while not done:
            observation, reward, terminated, truncated, _ = env.step(controller.act(observation, env.unwrapped.target))
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mazes", nargs="+", default=list(MAZE2D_LAYOUTS), choices=list(MAZE2D_LAYOUTS))
    parser.add_argument("--rewards", nargs="+", default=list(REWARD_TYPES), choices=list(REWARD_TYPES))
    args = parser.parse_args()
    print("| env | random policy here | D4RL's REF_MIN_SCORE | waypoint controller here | D4RL's REF_MAX_SCORE |")
    print("|---|---|---|---|---|")
    for reward_type in args.rewards:
        for maze in args.mazes:
            env_id = d4rl_maze2d_id(maze, reward_type)
            low, high = reference_scores(env_id) or (float("nan"), float("nan"))
            random_return, expert_return = random_reference_return(env_id), expert_reference_return(env_id)
            print(f"| `{env_id}` | {random_return:.2f} | {low:.2f} | {expert_return:.2f} | {high:.2f} |", flush=True)


if __name__ == "__main__":
    main()
