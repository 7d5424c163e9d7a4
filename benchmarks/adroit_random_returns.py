"""A uniform-random policy's return on D4RL's Adroit envs here, against D4RL's own random reference.

    python benchmarks/adroit_random_returns.py [--episodes 100]

D4RL's normalised score puts 0 at REF_MIN_SCORE, a random policy's mean return on D4RL's own envs
(mujoco-py, not installable here). The same policy on the env a run evaluates on should land there:
this compares `D4RL/<task>-v1` (Gymnasium-Robotics' hand with D4RL's reward, end and time limit,
`offline_rl.envs.adroit`) and Gymnasium-Robotics' `AdroitHand<Task>-v1` as they are, over the same
seeded episodes. A correctness check of the evaluation env, not a timing.

A third column replays D4RL's own procedure (`generate_ref_min_score.py`) with D4RL's own random
streams (`d4rl_streams`): the hands' resets draw the door's, board's, ball's or target's placement from
gym's old `seeding.np_random(0)`, in the order D4RL's `reset_model` draws them (Gymnasium-Robotics'
draws the same quantities in the same order), and the actions come from the action space seeded alike.
Its mean is comparable with D4RL's figure episode for episode rather than within a 100-episode spread.
"""

from __future__ import annotations

import offline_rl  # noqa: F401  first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

import argparse

import gymnasium as gym
import numpy as np
from d4rl_streams import legacy_gym_random_state, uniform_actions

from offline_rl.envs.adroit import ADROIT_TASKS, d4rl_adroit_id
from offline_rl.envs.make import make_env
from offline_rl.envs.scores import reference_scores


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


def d4rl_replay_return(env_id: str, episodes: int = 100) -> float:
    """D4RL's `generate_ref_min_score.py` with D4RL's streams: the mean return of `episodes` random
    episodes (each to its end or the time limit), resets and actions drawn as D4RL drew them."""
    env: gym.Env = make_env(env_id)
    env.unwrapped._np_random = legacy_gym_random_state(0)  # env.seed(0): reset_model's placements
    actions = legacy_gym_random_state(0)  # env.action_space.seed(0)
    returns = []
    for _ in range(episodes):
        env.reset()
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(uniform_actions(actions, env.action_space))
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=100)
    args = parser.parse_args()
    print(
        "| task | D4RL's random reference | D4RL/<task>-v1 (here) | Gymnasium-Robotics' AdroitHand<Task>-v1 "
        "| D4RL/<task>-v1, D4RL's streams |"
    )
    print("|---|---|---|---|---|")
    for task in ADROIT_TASKS:
        cells = []
        for env_id in (d4rl_adroit_id(task), f"AdroitHand{task.capitalize()}-v1"):
            returns, lengths = random_returns(env_id, args.episodes)
            cells.append(f"{returns.mean():.2f} ± {returns.std():.2f} ({lengths.mean():.0f} steps)")
        reference = reference_scores(task)
        assert reference is not None
        replayed = d4rl_replay_return(d4rl_adroit_id(task), args.episodes)
        print(f"| {task} | {reference[0]:.2f} | {cells[0]} | {cells[1]} | {replayed:.2f} |", flush=True)


if __name__ == "__main__":
    main()
