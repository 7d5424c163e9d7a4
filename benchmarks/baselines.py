"""Tianshou 2.0.1's own `CQL`, built the way its documentation builds it, for side-by-side benchmarks.

Networks match what our benchmarks give offline_rl's CQL-SAC: actor and two critics of `hidden_layers`
× 256 (2 unless a benchmark asks for the examples' 3), the actor's σ conditioned on the state. Cal-QL
is off (it needs Monte-Carlo returns the benchmarks do not compute).
"""

from __future__ import annotations

import offline_rl  # noqa: F401  first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

import gymnasium as gym
import torch
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
    hidden_layers: int = 2,
    device: str = "cpu",
) -> CQL:
    obs_dim, act_dim = observation_space.shape[0], action_space.shape[0]
    actor = ContinuousActorProbabilistic(
        preprocess_net=Net(state_shape=obs_dim, hidden_sizes=[256] * hidden_layers),
        action_shape=act_dim,
        unbounded=True,
        conditioned_sigma=True,
    ).to(device)

    def critic() -> ContinuousCritic:
        net = Net(state_shape=obs_dim, action_shape=act_dim, hidden_sizes=[256] * hidden_layers, concat=True)
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


class TianshouAtariQRDQNNet(torch.nn.Module):
    """The Nature CNN with a quantile head as Tianshou's Atari examples build it (NCHW layout,
    `obs -> (logits (B, A, Nq), state)`); Tianshou's package ships no Atari network of its own."""

    def __init__(self, input_shape: tuple[int, int, int], num_actions: int, num_quantiles: int) -> None:
        super().__init__()
        self.num_actions, self.num_quantiles = num_actions, num_quantiles
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(input_shape[0], 32, kernel_size=8, stride=4),
            torch.nn.ReLU(inplace=True),
            torch.nn.Conv2d(32, 64, kernel_size=4, stride=2),
            torch.nn.ReLU(inplace=True),
            torch.nn.Conv2d(64, 64, kernel_size=3, stride=1),
            torch.nn.ReLU(inplace=True),
            torch.nn.Flatten(),
            torch.nn.Linear(3136, 512),
            torch.nn.ReLU(inplace=True),
            torch.nn.Linear(512, num_actions * num_quantiles),
        )

    def forward(self, obs, state=None, info=None):
        device = self.net[0].weight.device
        x = torch.as_tensor(obs, device=device, dtype=torch.float32) / 255.0
        return self.net(x).view(-1, self.num_actions, self.num_quantiles), state
