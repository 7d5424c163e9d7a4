"""The actor the TD3 family and behaviour cloning train: a deterministic policy a = tanh(f(s)) on
normalised observations, and the Tianshou policy that evaluates it.

Its `forward` answers Tianshou's probabilistic-actor protocol, `obs -> ((f(s), 1), state)`, so
`SACPolicy` with `deterministic_eval` acts with tanh(f(s)): exactly the action the losses train, the
same evaluation, export (`offline_rl.algorithms.export`) and policy file (`behaviour_policy.pt`) as
CQL-SAC's actor, whose Gaussian mean takes the place of f.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tianshou.algorithm.modelfree.sac import SACPolicy
from tianshou.data import Batch
from torch import nn

from offline_rl.algorithms.layers import relu_mlp
from offline_rl.algorithms.networks import ObservationNormalizer, orthogonal_init_


class DeterministicActor(nn.Module):
    """a = tanh(f(s)), f an MLP with ReLU hidden layers (TD3's and CORL's actor; PyTorch's default
    initialisation unless `orthogonal_init`). `action` takes normalised observations, `forward` raw ones."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: list[int],
        normalizer: ObservationNormalizer,
        *,
        orthogonal_init: bool = False,
    ) -> None:
        super().__init__()
        self.act_dim = act_dim
        self.hidden_sizes = list(hidden_sizes)
        self.normalizer = normalizer
        self.net = relu_mlp(obs_dim, hidden_sizes, act_dim)
        if orthogonal_init:
            orthogonal_init_(self.net)

    def action(self, norm_obs: torch.Tensor) -> torch.Tensor:
        """tanh(f(s)) in the policy's [-1, 1] box, from normalised observations (B, D)."""
        return torch.tanh(self.net(norm_obs))

    def forward(self, obs: Any, state: Any = None, info: Any = None) -> tuple[tuple[torch.Tensor, torch.Tensor], Any]:
        obs_t = torch.as_tensor(obs, dtype=torch.float32, device=self.normalizer.mean.device)
        pre_tanh = self.net(self.normalizer(obs_t))
        return (pre_tanh, torch.ones_like(pre_tanh)), state


class GaussianMeanActor(DeterministicActor):
    """IQL's Gaussian policy, as CORL's `GaussianPolicy` builds it: N(tanh(f(s)), σ²) with a learned,
    state-independent log σ clamped to [−20, 2]. Unsquashed: its mean, the evaluation action, is the
    deterministic actor's tanh(f(s)); dataset actions are scored by the Gaussian's log-density."""

    LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: list[int], normalizer: ObservationNormalizer) -> None:
        super().__init__(obs_dim, act_dim, hidden_sizes, normalizer)
        self.log_std = nn.Parameter(torch.zeros(act_dim))

    def log_prob(self, norm_obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """log π(a|s) (B,) of actions (B, A), summed over the action dims."""
        mean = self.action(norm_obs)
        log_std = self.log_std.clamp(self.LOG_STD_MIN, self.LOG_STD_MAX)
        z = (actions - mean) * torch.exp(-log_std)
        return (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)


class GaussianActorPolicy(SACPolicy):
    """The policy of `GaussianMeanActor`: its mean tanh(f(s)) when evaluating, as `SACPolicy` acts; while
    collecting in a training step (fine-tuning online), a draw from N(tanh(f(s)), σ²) clipped to the box,
    as CORL's IQL explores (`SACPolicy` would squash a draw around f(s) instead)."""

    def forward(self, batch: Any, state: Any = None, **kwargs: Any) -> Any:
        if self.deterministic_eval and not self.is_within_training_step:
            return super().forward(batch, state, **kwargs)
        actor: GaussianMeanActor = self.actor  # type: ignore[assignment]
        (pre_tanh, _), hidden = actor(batch.obs, state=state, info=batch.info)
        std = actor.log_std.clamp(actor.LOG_STD_MIN, actor.LOG_STD_MAX).exp()
        mean = torch.tanh(pre_tanh)
        act = (mean + std * torch.randn_like(mean)).clamp(-1.0, 1.0)
        return Batch(act=act, state=hidden)


def target_copy(actor: DeterministicActor) -> DeterministicActor:
    """A frozen copy of the actor for TD targets, sharing its normaliser (fitted once, for both)."""
    return copy.deepcopy(actor, memo={id(actor.normalizer): actor.normalizer}).requires_grad_(False)


def deterministic_policy(
    observation_space: gym.Space,
    action_space: gym.Space,
    hidden_sizes: list[int],
    *,
    orthogonal_init: bool = False,
    gaussian: bool = False,
) -> tuple[SACPolicy, DeterministicActor, ObservationNormalizer]:
    """(policy, actor, normaliser) for the given spaces: the actor (`gaussian`: IQL's Gaussian around
    it) behind an observation normaliser, evaluated by its deterministic action mapped onto the env's
    action bounds."""
    if not isinstance(action_space, gym.spaces.Box):
        raise TypeError(f"a deterministic actor needs a Box action space, got {action_space}")
    obs_dim = int(np.prod(observation_space.shape))
    act_dim = int(np.prod(action_space.shape))
    normalizer = ObservationNormalizer(obs_dim)
    if gaussian:
        actor: DeterministicActor = GaussianMeanActor(obs_dim, act_dim, hidden_sizes, normalizer)
    else:
        actor = DeterministicActor(obs_dim, act_dim, hidden_sizes, normalizer, orthogonal_init=orthogonal_init)
    policy = (GaussianActorPolicy if gaussian else SACPolicy)(
        actor=actor,
        action_space=action_space,
        observation_space=observation_space,
        action_scaling=True,
        deterministic_eval=True,
    )
    return policy, actor, normalizer
