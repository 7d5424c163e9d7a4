"""Behaviour cloning's loss against a hand-computed reference, and CORL's BC-x%: the best episodes,
whole, ranked by return, with episodes ending where the data says (time-outs included)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from tianshou.data import Batch, ReplayBuffer

from offline_rl.algorithms.bc import BC, BCConfig
from offline_rl.algorithms.bc.algorithm import best_episodes
from offline_rl.algorithms.staging import Transitions
from offline_rl.data import set_action_units


def tiny_bc(**overrides) -> BC:
    config = BCConfig(**{"hidden_sizes": [3], "normalize_obs": False, **overrides})
    algo = BC.build(gym.spaces.Box(-10, 10, (2,), np.float32), gym.spaces.Box(-1, 1, (2,), np.float32), config)
    with torch.no_grad():
        for index, param in enumerate(algo.actor.net.parameters()):
            param.copy_(torch.linspace(-0.5, 0.6, param.numel()).reshape(param.shape) * (index + 1))
    return algo


def test_bc_loss_is_the_mean_squared_error_of_the_tanh_action() -> None:
    algo = tiny_bc()
    obs = np.array([[0.5, -1.0], [1.5, 0.25], [-0.3, 0.8]], np.float32)
    act = np.array([[0.3, -0.2], [-0.6, 0.9], [0.0, 0.1]], np.float32)
    linears = [m for m in algo.actor.net if isinstance(m, torch.nn.Linear)]
    errors = []
    for row in range(3):
        hidden = obs[row].astype(np.float64)
        for depth, linear in enumerate(linears):
            w, b = linear.weight.detach().double().numpy(), linear.bias.detach().double().numpy()
            out = np.array([sum(w[j, i] * hidden[i] for i in range(len(hidden))) + b[j] for j in range(len(b))])
            hidden = out if depth == len(linears) - 1 else np.maximum(out, 0.0)
        errors += list((np.tanh(hidden) - act[row]) ** 2)
    columns = (obs, act, np.zeros(3, np.float32), np.ones(3, np.float32), obs)
    losses = algo.compute_losses(Transitions(*(torch.as_tensor(column) for column in columns)))
    assert float(losses.parts["actor"].detach()) == pytest.approx(np.mean(errors), rel=1e-6)


def test_best_episodes_keeps_the_top_fraction_whole_and_in_order() -> None:
    # Five episodes of returns 3, 10, -1, 7, 4 (rows 0-1, 2-4, 5, 6-8, 9-10).
    rewards = np.array([1, 2, 5, 5, 0, -1, 3, 3, 1, 2, 2], np.float32)
    ends = np.zeros(11, bool)
    ends[[1, 4, 5, 8, 10]] = True
    assert best_episodes(rewards, ends, 0.4).tolist() == [2, 3, 4, 6, 7, 8]  # ⌊0.4·5⌋ = 2: returns 10 and 7
    assert best_episodes(rewards, ends, 0.1).tolist() == [2, 3, 4]  # at least one episode
    assert best_episodes(rewards, ends, 0.99).tolist() == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10]  # ⌊4.95⌋ = 4


def test_rows_after_the_last_end_are_an_episode_of_their_own() -> None:
    rewards = np.array([1, 1, 9, 9], np.float32)
    ends = np.array([False, True, False, False])  # the data stops in the middle of its second episode
    assert best_episodes(rewards, ends, 0.5).tolist() == [2, 3]


def episode_buffer() -> ReplayBuffer:
    """Three episodes: returns 2 (terminated), 30 (cut by a time limit), 6 (terminated); observations
    say which episode they belong to."""
    buffer = ReplayBuffer(20)
    for episode, (length, reward, timed_out) in enumerate([(2, 1.0, False), (3, 10.0, True), (2, 3.0, False)]):
        for step in range(length):
            last = step == length - 1
            obs = np.array([episode, step], np.float32)
            buffer.add(
                Batch(
                    obs=obs, act=np.full(2, 0.1 * episode, np.float32), rew=reward, terminated=last and not timed_out,
                    truncated=last and timed_out, obs_next=obs + 1, info={},
                )
            )  # fmt: skip
    set_action_units(buffer, "policy")
    return buffer


def test_bc_top_fraction_stages_only_the_best_episode_and_fits_its_normaliser_on_it() -> None:
    algo = tiny_bc(top_fraction=0.34, normalize_obs=True)  # ⌊0.34·3⌋ = 1: the time-out episode, return 30
    dataset = algo.staged(episode_buffer())
    assert dataset.size == 3
    assert torch.allclose(algo.normalizer.mean, torch.tensor([1.0, 1.0]))  # episode 1, steps 0-2
    raw_episode = dataset.obs * algo.normalizer.std + algo.normalizer.mean
    assert torch.allclose(raw_episode[:, 0], torch.ones(3))


def test_bc_without_a_fraction_stages_every_row() -> None:
    algo = tiny_bc()
    assert algo.staged(episode_buffer()).size == 7
