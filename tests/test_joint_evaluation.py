"""A seed batch's joint evaluation (`offline_rl.runs.joint_evaluation`): each seed's part is exactly the
evaluation its single run makes of the same policy (the same episodes, in the same order, with the same
ε-greedy coins), whether it plays a number of episodes or a budget of steps, and a seed that left is
evaluated no more."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from tianshou.env import DummyVectorEnv

from offline_rl.runs.evaluation_collector import EVALUATION_SEED_OFFSET, EvaluationCollector
from offline_rl.runs.joint_evaluation import JointEvaluation

SEEDS, TEST_NUM = [3, 4, 5], 2


def policy(seed: int, eps: float) -> object:
    """A discrete CQL policy of CartPole with its own random weights, ε-greedy at `eps` when evaluated."""
    from offline_rl.algorithms.discrete_cql import CQLQRDQN, DiscreteCQLConfig

    torch.manual_seed(seed)
    env = gym.make("CartPole-v1")
    config = DiscreteCQLConfig(num_quantiles=4, eps_test=eps, hidden_sizes=[8])
    algorithm = CQLQRDQN.build(env.observation_space, env.action_space, config)
    algorithm.eval()
    return algorithm.policy


def envs(count: int) -> DummyVectorEnv:
    return DummyVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(count)])


def alone(policy_: object, seed: int, episodes: int, min_steps: int) -> object:
    collector = EvaluationCollector(policy_, envs(TEST_NUM), seed + EVALUATION_SEED_OFFSET, min_steps=min_steps)
    collector.reset()
    return collector.collect(n_episode=episodes)


@pytest.mark.parametrize(("episodes", "min_steps"), [(TEST_NUM, 0), (3, 0), (TEST_NUM, 150)])
def test_each_seed_plays_what_its_single_run_plays(episodes: int, min_steps: int) -> None:
    policies = [policy(seed, eps=0.3) for seed in SEEDS]
    joint = JointEvaluation(policies, envs(len(SEEDS) * TEST_NUM), SEEDS, TEST_NUM, min_steps=min_steps)
    seats = [joint.seat(index) for index in range(len(SEEDS))]
    for _ in range(2):  # a second evaluation reseeds and plays the same episodes again
        for seat in seats:
            seat.reset()
        together = [seat.collect(n_episode=episodes) for seat in seats]
        for own, policy_, seed in zip(together, policies, SEEDS, strict=True):
            single = alone(policy_, seed, episodes, min_steps)
            np.testing.assert_array_equal(own.returns, single.returns)
            np.testing.assert_array_equal(own.lens, single.lens)
            assert own.returns_stat is not None and own.collect_time > 0
    assert len({tuple(own.returns) for own in together}) == len(SEEDS)  # three policies, three evaluations
    assert seats[0].collect_episode == 2 * len(together[0].returns)
    joint.close()


def test_a_seed_that_left_is_evaluated_no_more() -> None:
    policies = [policy(seed, eps=0.0) for seed in SEEDS]
    joint = JointEvaluation(policies, envs(len(SEEDS) * TEST_NUM), SEEDS, TEST_NUM)
    joint.drop(1)
    first, last = joint.seat(0).collect(n_episode=TEST_NUM), joint.seat(2).collect(n_episode=TEST_NUM)
    assert set(joint.pending) == set() and len(first.returns) == len(last.returns) == TEST_NUM
    np.testing.assert_array_equal(last.returns, alone(policies[2], SEEDS[2], TEST_NUM, 0).returns)
    joint.close()
