"""The SACPolicy CQL-SAC trains and evaluates, with its networks, built for an env's spaces: a
tanh-Gaussian actor behind the observation normaliser, an ensemble of critics, and (with
`eval_q_filter`) the Q-filtered evaluation policy."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from tianshou.algorithm.modelfree.sac import SACPolicy

from offline_rl.algorithms.cql_sac.config import CQLSACConfig
from offline_rl.algorithms.cql_sac.networks import TanhGaussianActor
from offline_rl.algorithms.cql_sac.q_filter import QFilteredSACPolicy
from offline_rl.algorithms.networks import EnsembleCritic, ObservationNormalizer


def build_networks(
    observation_space: gym.Space, action_space: gym.Space, config: CQLSACConfig
) -> tuple[SACPolicy, EnsembleCritic, ObservationNormalizer]:
    """(policy, critics, normaliser) for the given spaces, sized by `config`."""
    if not isinstance(action_space, gym.spaces.Box):
        raise TypeError(f"CQL-SAC needs a Box action space, got {action_space}")
    obs_dim = int(np.prod(observation_space.shape))
    act_dim = int(np.prod(action_space.shape))
    normalizer = ObservationNormalizer(obs_dim)
    actor = TanhGaussianActor(
        obs_dim,
        act_dim,
        config.actor_hidden_sizes,
        normalizer,
        orthogonal_init=config.orthogonal_init,
        log_std_offset=config.log_std_offset,
    )
    critic = EnsembleCritic(
        obs_dim, act_dim, config.critic_hidden_sizes, config.num_critics, orthogonal_init=config.orthogonal_init
    )
    policy_kwargs: dict[str, Any] = dict(
        actor=actor,
        action_space=action_space,
        observation_space=observation_space,
        action_scaling=True,
        deterministic_eval=True,
    )
    if config.eval_q_filter:
        return QFilteredSACPolicy(q_filter_samples=config.eval_q_filter, **policy_kwargs), critic, normalizer
    return SACPolicy(**policy_kwargs), critic, normalizer
