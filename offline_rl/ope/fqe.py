"""Fitted Q evaluation (FQE; Le, Voloshin & Yue 2019; as a model-selection tool, Paine et al. 2020).

Offline RL trains without the env, yet its checkpoints are usually picked by playing them. FQE
estimates a fixed policy π's value from the data alone: a fresh Q network regresses onto

    y = r + γ (1 − terminated) Q̄(s′, π(s′))

over the data's transitions (Q̄ a target copy of Q, refreshed every `target_update_freq` updates), and
π's value is Q(s₀, π(s₀)) averaged over the data's episode starts. Unlike the critics of the run itself,
which CQL pushes down on purpose, nothing here is conservative: FQE answers "what would π earn", which
is how runs, seeds and settings can be compared without an env step.

Two properties every offline loader here guarantees carry over: a time-out (`truncated`) bootstraps from
`obs_next` like any step, only `terminated` stops it, and `obs_next` never belongs to another episode.
π acts as it does in evaluation (a SAC actor's mean action, a Q network's greedy one), computed once
for every `obs_next` and every start, since π does not change while Q is fitted.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from offline_rl.discrete_cql.networks import QuantileMLP, QuantileNatureCNN
from offline_rl.mlp import relu_mlp
from offline_rl.value_check import discounted_returns

ActFunction = Callable[[np.ndarray], np.ndarray]
"""π in evaluation: a batch of observations to the env's actions (floats, or integer indices)."""

CHUNK = 4096
"""Observations π acts on at once while its actions are computed ahead of the fit."""


class StateActionMLP(nn.Module):
    """Q(s, a) for continuous actions: a ReLU MLP over the observation and the action side by side."""

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: list[int]) -> None:
        super().__init__()
        self.net = relu_mlp(obs_dim + act_dim, hidden_sizes, 1)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs.reshape(obs.shape[0], -1), actions.reshape(actions.shape[0], -1)], 1))[:, 0]


class ActionValueNetwork(nn.Module):
    """Q(s, a) for discrete actions: one value per action (a one-quantile head of the discrete CQL
    networks: the Nature CNN on frames, an MLP on vectors), read at the given action indices."""

    def __init__(self, observation_shape: tuple[int, ...], num_actions: int, hidden_sizes: list[int]) -> None:
        super().__init__()
        if len(observation_shape) == 3:
            self.model: nn.Module = QuantileNatureCNN(observation_shape, num_actions, 1)
        else:
            self.model = QuantileMLP(int(np.prod(observation_shape)), num_actions, 1, hidden_sizes)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        values = self.model(obs)[0][..., 0]
        return values.gather(1, actions.long().reshape(-1, 1))[:, 0]


def fqe_network(
    observation_shape: tuple[int, ...], *, discrete: bool, action_size: int, hidden_sizes: list[int]
) -> nn.Module:
    """A fresh Q network for FQE: `action_size` is the number of actions (discrete) or the action's length."""
    if discrete:
        return ActionValueNetwork(observation_shape, action_size, hidden_sizes)
    return StateActionMLP(int(np.prod(observation_shape)), action_size, hidden_sizes)


def fqe_target(
    rewards: torch.Tensor, terminated: torch.Tensor, next_values: torch.Tensor, gamma: float
) -> torch.Tensor:
    """r + γ (1 − terminated) Q̄(s′, π(s′)): a time-out bootstraps, only a terminal state stops it."""
    return rewards + gamma * (1.0 - terminated.float()) * next_values


@dataclass
class FQEBatch:
    """One minibatch on the device: the data's transitions and π's action at each `obs_next`."""

    obs: torch.Tensor
    act: torch.Tensor
    rew: torch.Tensor
    terminated: torch.Tensor
    obs_next: torch.Tensor
    next_act: torch.Tensor


class FittedQEvaluation:
    """The regression: a Q network, its target copy and their Adam; `update` is one gradient step."""

    def __init__(
        self, network: nn.Module, *, gamma: float, lr: float, target_update_freq: int, device: str | torch.device
    ) -> None:
        self.q = network.to(device)
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=lr)
        self.gamma, self.target_update_freq, self.device = gamma, target_update_freq, torch.device(device)
        self.updates = 0

    def loss(self, batch: FQEBatch) -> torch.Tensor:
        """The mean squared TD error against the target network's bootstrapped value."""
        with torch.no_grad():
            target = fqe_target(batch.rew, batch.terminated, self.q_target(batch.obs_next, batch.next_act), self.gamma)
        return F.mse_loss(self.q(batch.obs, batch.act), target)

    def update(self, batch: FQEBatch) -> torch.Tensor:
        loss = self.loss(batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.updates += 1
        if self.updates % self.target_update_freq == 0:
            self.q_target.load_state_dict(self.q.state_dict())
        return loss.detach()

    @torch.no_grad()
    def values(self, obs: Any, actions: Any) -> np.ndarray:
        """Q(s, a) of the fitted network, in chunks."""
        out = [
            self.q(
                on_device(obs[start : start + CHUNK], self.device),
                on_device(actions[start : start + CHUNK], self.device),
            )
            for start in range(0, len(actions), CHUNK)
        ]
        return torch.cat(out).cpu().numpy() if out else np.zeros(0, np.float32)


def on_device(array: Any, device: torch.device) -> torch.Tensor:
    """A host array as a tensor on `device`; float64 (numpy's default) as float32, other types as they are
    (uint8 frames stay one byte a value until the network scales them)."""
    tensor = torch.as_tensor(np.asarray(array), device=device)
    return tensor.float() if tensor.dtype == torch.float64 else tensor


@dataclass(frozen=True)
class FQEEstimate:
    """What FQE says of π on the data, beside what the data's own (behaviour) episodes earned."""

    value: float
    """Q(s₀, π(s₀)) averaged over the data's episode starts: π's estimated discounted return."""
    behaviour_return: float
    """The data's episodes' discounted returns from the same starts, averaged (the behaviour policy's)."""
    starts: int
    updates: int
    gamma: float
    last_loss: float
    """The TD loss averaged over the last 1% of the updates (at least one)."""


def episode_starts(done: np.ndarray) -> np.ndarray:
    """The first index of every episode of a buffer whose episodes lie one after another."""
    return np.concatenate([[0], np.flatnonzero(done[:-1]) + 1]).astype(np.int64)


def policy_actions(buffer: Any, act: ActFunction, *, next_observations: bool, indices: np.ndarray) -> np.ndarray:
    """π's action at `obs_next` (or `obs`) of the given transitions, CHUNK at a time."""
    key = "obs_next" if next_observations else "obs"
    parts = [np.asarray(act(buffer[indices[i : i + CHUNK]][key])) for i in range(0, len(indices), CHUNK)]
    return np.concatenate(parts)


def fitted_q_evaluation(
    buffer: Any,
    act: ActFunction,
    *,
    discrete: bool,
    action_size: int,
    gamma: float,
    updates: int,
    batch_size: int,
    lr: float = 1e-4,
    target_update_freq: int = 100,
    hidden_sizes: list[int] | None = None,
    device: str | torch.device = "cpu",
    seed: int = 0,
    progress: Callable[[range], Any] = iter,
) -> FQEEstimate:
    """FQE of the policy `act` on a Tianshou `buffer` whose episodes lie one after another (every
    offline_rl loader's). `progress` wraps the range of updates (a progress bar)."""
    size = len(buffer)
    if size == 0:
        raise ValueError("fitted Q evaluation needs at least one transition")
    generator = np.random.default_rng(seed)
    torch.manual_seed(seed)
    everything = np.arange(size)
    next_actions = policy_actions(buffer, act, next_observations=True, indices=everything)
    starts = episode_starts(np.asarray(buffer.done[:size]))
    first = buffer[starts[:1]]
    network = fqe_network(
        tuple(np.asarray(first.obs).shape[1:]),
        discrete=discrete,
        action_size=action_size,
        hidden_sizes=list(hidden_sizes or [256, 256]),
    )
    fit = FittedQEvaluation(network, gamma=gamma, lr=lr, target_update_freq=target_update_freq, device=device)
    losses = []
    tail = max(1, updates // 100)
    for step in progress(range(updates)):
        indices = generator.integers(0, size, batch_size)
        data = buffer[indices]
        batch = FQEBatch(
            obs=on_device(data.obs, fit.device),
            act=on_device(data.act, fit.device),
            rew=on_device(data.rew, fit.device).float(),
            terminated=on_device(data.terminated, fit.device),
            obs_next=on_device(data.obs_next, fit.device),
            next_act=on_device(next_actions[indices], fit.device),
        )
        loss = fit.update(batch)
        if step >= updates - tail:
            losses.append(loss)
    start_actions = policy_actions(buffer, act, next_observations=False, indices=starts)
    value = float(fit.values(buffer[starts].obs, start_actions).mean())
    ends = np.append(starts[1:], size)
    rewards = np.asarray(buffer.rew[:size], dtype=np.float64)
    behaviour, _weights = discounted_returns([rewards[a:b] for a, b in zip(starts, ends, strict=True)], gamma)
    return FQEEstimate(
        value=value,
        behaviour_return=float(behaviour.mean()),
        starts=len(starts),
        updates=updates,
        gamma=gamma,
        last_loss=float(torch.stack(losses).mean()) if losses else float("nan"),
    )
