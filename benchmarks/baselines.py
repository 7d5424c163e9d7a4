"""Tianshou 2.0.1's own `CQL`, built the way its documentation builds it, for side-by-side benchmarks.

Networks match what our benchmarks give offline_rl's CQL-SAC: actor 2×256 (state-conditioned σ),
two critics 2×256. Cal-QL is off (it needs Monte-Carlo returns the benchmarks do not compute).
"""

from __future__ import annotations

import gymnasium as gym
from tianshou.algorithm import CQL
from tianshou.algorithm.modelfree.sac import Alpha, SACPolicy
from tianshou.algorithm.optim import AdamOptimizerFactory
from tianshou.utils.net.common import Net
from tianshou.utils.net.continuous import ContinuousActorProbabilistic, ContinuousCritic


def tianshou_cql(
    observation_space: gym.spaces.Box,
    action_space: gym.spaces.Box,
    *,
    alpha: float | Alpha,
    cql_weight: float,
    num_repeat_actions: int = 10,
    device: str = "cpu",
) -> CQL:
    obs_dim, act_dim = observation_space.shape[0], action_space.shape[0]
    actor = ContinuousActorProbabilistic(
        preprocess_net=Net(state_shape=obs_dim, hidden_sizes=[256, 256]),
        action_shape=act_dim,
        unbounded=True,
        conditioned_sigma=True,
    ).to(device)

    def critic() -> ContinuousCritic:
        net = Net(state_shape=obs_dim, action_shape=act_dim, hidden_sizes=[256, 256], concat=True)
        return ContinuousCritic(preprocess_net=net).to(device)

    policy = SACPolicy(actor=actor, action_space=action_space, observation_space=observation_space)
    return CQL(
        policy=policy,
        policy_optim=AdamOptimizerFactory(lr=1e-4),
        critic=critic(),
        critic_optim=AdamOptimizerFactory(lr=3e-4),
        critic2=critic(),
        critic2_optim=AdamOptimizerFactory(lr=3e-4),
        alpha=alpha,
        cql_weight=cql_weight,
        with_lagrange=False,
        num_repeat_actions=num_repeat_actions,
        calibrated=False,
        min_action=float(action_space.low.min()),
        max_action=float(action_space.high.max()),
    ).to(device)
