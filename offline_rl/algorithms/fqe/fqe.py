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

The transitions are staged once with discrete CQL's machinery (`stage_transitions` with one-step
returns: r and γ (1 − terminated) per transition, frames stored once), so that on a GPU an update is a
few gathers and the network's arithmetic rather than a host-side assembly and copy of each batch.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from offline_rl.algorithms.discrete_cql.algorithm import nstep_returns
from offline_rl.algorithms.discrete_cql.networks import QuantileMLP, QuantileNatureCNN
from offline_rl.algorithms.discrete_cql.staging import StagedTransitions, stage_transitions
from offline_rl.algorithms.layers import relu_mlp
from offline_rl.algorithms.staging import episode_ends, monte_carlo_returns, stored_indices

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


def fqe_target(returns: torch.Tensor, bootstrap: torch.Tensor, next_values: torch.Tensor) -> torch.Tensor:
    """r + γ (1 − terminated) Q̄(s′, π(s′)), with `bootstrap` = γ (1 − terminated) per transition."""
    return returns + bootstrap * next_values


@dataclass
class FQEBatch:
    """One minibatch on the device: the data's transitions and π's action at each `obs_next`."""

    obs: torch.Tensor
    act: torch.Tensor
    returns: torch.Tensor
    """r, the transition's reward."""
    bootstrap: torch.Tensor
    """γ (1 − terminated): a time-out bootstraps like any step, only a terminal state stops the value."""
    obs_next: torch.Tensor
    next_act: torch.Tensor


class FittedQEvaluation:
    """The regression: a Q network, its target copy and their Adam; `update` is one gradient step."""

    def __init__(self, network: nn.Module, *, lr: float, target_update_freq: int, device: str | torch.device) -> None:
        self.q = network.to(device)
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=lr)
        self.target_update_freq, self.device = target_update_freq, torch.device(device)
        self.updates = 0

    def loss(self, batch: FQEBatch) -> torch.Tensor:
        """The mean squared TD error against the target network's bootstrapped value."""
        with torch.no_grad():
            target = fqe_target(batch.returns, batch.bootstrap, self.q_target(batch.obs_next, batch.next_act))
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
    """An array or tensor as a tensor on `device`; float64 (numpy's default) as float32, other types as
    they are (uint8 frames stay one byte a value until the network scales them)."""
    tensor = torch.as_tensor(array if isinstance(array, torch.Tensor) else np.asarray(array), device=device)
    return tensor.float() if tensor.dtype == torch.float64 else tensor


class BufferRows:
    """The transitions of a buffer that staging cannot hold (a Tianshou buffer stacking frames at
    sampling time, `stack_num` > 1): their observations are read through `buffer[...]` per batch,
    the rest was tabled once. `take` answers like `StagedTransitions.take`."""

    def __init__(self, buffer: Any, indices: np.ndarray, act: np.ndarray, returns: np.ndarray, bootstrap: np.ndarray):
        self.buffer, self.indices = buffer, indices
        self.act = torch.as_tensor(act)
        self.returns = torch.as_tensor(returns, dtype=torch.float32)
        self.bootstrap = torch.as_tensor(bootstrap, dtype=torch.float32)

    def take(self, rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
        data = self.buffer[self.indices[rows.numpy()]]
        obs, obs_next = torch.as_tensor(np.asarray(data.obs)), torch.as_tensor(np.asarray(data.obs_next))
        return obs, self.act[rows], self.returns[rows], self.bootstrap[rows], obs_next


def fqe_transitions(
    buffer: Any, indices: np.ndarray, *, discrete: bool, gamma: float, device: torch.device
) -> StagedTransitions | BufferRows:
    """The transitions at `indices` with r and γ (1 − terminated), as discrete CQL stages its data (one-step
    returns): on the device when they fit there, else in host memory, else read from the buffer."""
    returns, bootstrap, last = nstep_returns(buffer, indices, 1, gamma)
    act_dtype = torch.long if discrete else torch.float32
    staged = stage_transitions(buffer, returns, bootstrap, indices, last, device, act_dtype=act_dtype)
    if isinstance(staged, str):
        return BufferRows(buffer, indices, np.asarray(buffer.act[indices]), returns, bootstrap)
    return staged


ROWS_PER_DRAW = 1000
"""Updates whose batch rows are drawn together and moved to the data's device in one copy."""


def sampled_rows(
    size: int, batch_size: int, updates: int, *, seed: int, device: torch.device
) -> Iterator[torch.Tensor]:
    """Each update's batch rows. They come from one seeded stream on the host whatever the device, so
    an estimate repeats on the CPU and on a GPU, and no update waits for the host to draw them."""
    generator = torch.Generator().manual_seed(seed)
    for first in range(0, updates, ROWS_PER_DRAW):
        count = min(ROWS_PER_DRAW, updates - first)
        yield from torch.randint(size, (count, batch_size), generator=generator).to(device)


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


def episode_starts(episode_end: np.ndarray) -> np.ndarray:
    """The row of every episode's first transition, given whether each row ends its episode (rows in
    Tianshou's order, where each episode's transitions follow one another)."""
    return np.concatenate([[0], np.flatnonzero(episode_end[:-1]) + 1]).astype(np.int64)


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
    """FQE of the policy `act` on any Tianshou `buffer` (every valid transition, in Tianshou's order; a
    `VectorReplayBuffer`'s episodes stay apart). `progress` wraps the range of updates (a progress bar)."""
    device = torch.device(device)
    indices = stored_indices(buffer)
    if len(indices) == 0:
        raise ValueError("fitted Q evaluation needs at least one transition")
    torch.manual_seed(seed)
    transitions = fqe_transitions(buffer, indices, discrete=discrete, gamma=gamma, device=device)
    data_device = transitions.act.device
    next_actions = on_device(policy_actions(buffer, act, next_observations=True, indices=indices), data_device)
    episode_end = episode_ends(buffer, indices)
    starts = episode_starts(episode_end)
    first = buffer[indices[:1]]
    network = fqe_network(
        tuple(np.asarray(first.obs).shape[1:]),
        discrete=discrete,
        action_size=action_size,
        hidden_sizes=list(hidden_sizes or [256, 256]),
    )
    fit = FittedQEvaluation(network, lr=lr, target_update_freq=target_update_freq, device=device)
    losses = []
    tail = max(1, updates // 100)
    rows = sampled_rows(len(indices), batch_size, updates, seed=seed, device=data_device)
    for step, batch_rows in zip(progress(range(updates)), rows, strict=True):
        obs, actions, returns, bootstrap, obs_next = (on_device(t, device) for t in transitions.take(batch_rows))
        batch = FQEBatch(obs, actions, returns, bootstrap, obs_next, on_device(next_actions[batch_rows], device))
        loss = fit.update(batch)
        if step >= updates - tail:
            losses.append(loss)
    start_indices = indices[starts]
    start_actions = policy_actions(buffer, act, next_observations=False, indices=start_indices)
    value = float(fit.values(buffer[start_indices].obs, start_actions).mean())
    rewards = np.asarray(buffer.rew[indices], dtype=np.float64)
    behaviour = monte_carlo_returns(rewards, episode_end, gamma)[starts]
    return FQEEstimate(
        value=value,
        behaviour_return=float(behaviour.astype(np.float64).mean()),
        starts=len(starts),
        updates=updates,
        gamma=gamma,
        last_loss=float(torch.stack(losses).mean()) if losses else float("nan"),
    )
