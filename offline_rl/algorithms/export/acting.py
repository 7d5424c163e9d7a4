"""What a trained policy does in evaluation, as a plain torch module: a SAC/CQL actor's Gaussian mean
squashed by tanh and scaled to the env's action bounds, or the greedy action of a Q or quantile network
(no ε). Exported files and fitted Q evaluation both act through it."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn


class DeterministicActorPolicy(nn.Module):
    """The evaluation action of a SAC-style actor: tanh of the Gaussian mean, then (with the policy's
    action scaling) mapped from [-1, 1] onto the env's bounds, as Tianshou's `map_action` does."""

    def __init__(self, actor: nn.Module, low: np.ndarray, high: np.ndarray, *, scaling: bool) -> None:
        super().__init__()
        self.actor, self.scaling = actor, scaling
        self.register_buffer("low", torch.as_tensor(np.asarray(low, dtype=np.float32)))
        self.register_buffer("high", torch.as_tensor(np.asarray(high, dtype=np.float32)))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        (mean, _scale), _state = self.actor(obs)
        squashed = torch.tanh(mean)
        if not self.scaling:
            return squashed
        return self.low + (squashed + 1.0) * 0.5 * (self.high - self.low)


class GreedyDiscretePolicy(nn.Module):
    """The greedy action of a Q network (batch, actions) or a quantile network (batch, actions,
    quantiles: the mean over quantiles is the Q-value), as Tianshou's DQN-family policies act."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def action_values(self, obs: torch.Tensor) -> torch.Tensor:
        values = self.model(obs)[0]
        return values.mean(dim=-1) if values.dim() == 3 else values

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.action_values(obs).argmax(dim=-1)


def acting_module(policy: Any) -> nn.Module:
    """The part of a Tianshou policy that acts in evaluation, as a module of observations alone."""
    from tianshou.algorithm.modelfree.sac import SACPolicy  # heavy (Tianshou): loaded only when used

    if isinstance(policy, SACPolicy):
        space = policy.action_space
        return DeterministicActorPolicy(policy.actor, space.low, space.high, scaling=bool(policy.action_scaling))
    model = getattr(policy, "model", None)
    if isinstance(model, nn.Module) and hasattr(policy, "compute_q_value"):
        return GreedyDiscretePolicy(model)
    raise TypeError(f"cannot export a {type(policy).__name__}: SAC-style and DQN-family policies are exported")


@torch.no_grad()
def evaluation_actions(policy: Any, observations: np.ndarray) -> np.ndarray:
    """What the policy does with these observations when a Tianshou collector evaluates it (eval
    mode, no exploration), in the env's action space. A SAC policy is asked for its mean action,
    which is how its evaluation acts unless it was built with `deterministic_eval=False` or
    evaluates with a Q filter (`QFilteredSACPolicy`: the file holds no critics)."""
    from tianshou.data import Batch  # heavy (Tianshou): loaded only when used

    training, deterministic = policy.training, getattr(policy, "deterministic_eval", None)
    q_filter = getattr(policy, "q_filter_samples", None)
    policy.eval()
    if deterministic is not None:
        policy.deterministic_eval = True
    if q_filter is not None:
        policy.q_filter_samples = 0
    try:
        actions = policy(Batch(obs=observations, info=Batch())).act
        return np.asarray(policy.map_action(actions.cpu().numpy() if torch.is_tensor(actions) else actions))
    finally:
        policy.train(training)
        if deterministic is not None:
            policy.deterministic_eval = deterministic
        if q_filter is not None:
            policy.q_filter_samples = q_filter
