"""A uniform-random policy's return on D4RL's Adroit envs here, against D4RL's own random reference.

    python benchmarks/adroit_random_returns.py [--episodes 100]

D4RL's normalised score puts 0 at REF_MIN_SCORE, a random policy's mean return on D4RL's own envs
(mujoco-py, not installable here). The same policy on the env a run evaluates on should land there:
this compares `D4RL/<task>-v1` (Gymnasium-Robotics' hand with D4RL's reward, end and time limit,
`offline_rl.d4rl_adroit`) and Gymnasium-Robotics' `AdroitHand<Task>-v1` as they are, over the same
seeded episodes. A correctness check of the evaluation env, not a timing.
"""

from __future__ import annotations

import offline_rl  # noqa: F401  first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

import argparse

import gymnasium as gym
import numpy as np

from offline_rl.d4rl_adroit import ADROIT_TASKS, d4rl_adroit_id
from offline_rl.envs import make_env
from offline_rl.scores import reference_scores


def random_returns(env_id: str, episodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Returns and lengths of `episodes` uniform-random episodes, episode i seeded with i."""
    env: gym.Env = make_env(env_id)
    returns, lengths = np.zeros(episodes), np.zeros(episodes, dtype=int)
    for episode in range(episodes):
        env.reset(seed=episode)
        env.action_space.seed(episode)
        done = False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            returns[episode] += float(reward)
            lengths[episode] += 1
            done = terminated or truncated
    env.close()
    return returns, lengths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=100)
    args = parser.parse_args()
    print("| task | D4RL's random reference | D4RL/<task>-v1 (here) | Gymnasium-Robotics' AdroitHand<Task>-v1 |")
    print("|---|---|---|---|")
    for task in ADROIT_TASKS:
        cells = []
        for env_id in (d4rl_adroit_id(task), f"AdroitHand{task.capitalize()}-v1"):
            returns, lengths = random_returns(env_id, args.episodes)
            cells.append(f"{returns.mean():.2f} ± {returns.std():.2f} ({lengths.mean():.0f} steps)")
        reference = reference_scores(task)
        assert reference is not None
        print(f"| {task} | {reference[0]:.2f} | {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
