"""Read any Tianshou buffer exactly once, in Tianshou's order, to stage it where an algorithm samples.

Tianshou's own algorithms sample through `buffer.sample`, which knows each buffer kind's layout.
Algorithms that keep the data on their device instead must read the same transitions: only the
valid rows (a partially filled `VectorReplayBuffer` has empty slots between its sub-buffers), in
the order `buffer.sample_indices(0)` gives (each sub-buffer from its oldest transition to its
newest), with observations as `buffer[indices]` assembles them (frame stacks, `ignore_obs_next`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from tianshou.algorithm.algorithm_base import Algorithm
from tianshou.data import Batch, HERReplayBuffer, PrioritizedReplayBuffer, ReplayBuffer
from tianshou.data.buffer.manager import HERReplayBufferManager

from offline_rl.core.compat import buffer_columns
from offline_rl.core.errors import DatasetError
from offline_rl.data.action_units import needs_action_scaling
from offline_rl.data.stats import corl_reward_unit

COLUMNS = ("obs", "act", "rew", "terminated", "obs_next")


class StoredTransitions(NamedTuple):
    """The columns of every stored transition, row k being buffer index `indices[k]`."""

    obs: np.ndarray
    act: np.ndarray
    rew: np.ndarray
    terminated: np.ndarray
    obs_next: np.ndarray
    episode_end: np.ndarray  # done, or the newest step of a (sub-)buffer whose episode still runs
    indices: np.ndarray


def select_rows(stored: StoredTransitions, rows: np.ndarray) -> StoredTransitions:
    """The transitions at `rows` (ascending, so each kept episode stays whole and in order)."""
    return StoredTransitions(*(np.asarray(column)[rows] for column in stored))


def stored_indices(buffer: ReplayBuffer) -> np.ndarray:
    """Buffer indices of every stored transition, in Tianshou's order (`sample_indices(0)`)."""
    return np.asarray(buffer.sample_indices(0), dtype=np.int64)


def _is_identity(indices: np.ndarray) -> bool:
    return len(indices) == 0 or (int(indices[0]) == 0 and bool(np.all(np.diff(indices) == 1)))


_PLAIN_GETITEM = (ReplayBuffer.__getitem__, PrioritizedReplayBuffer.__getitem__)


def _reads_raw_columns(buffer: ReplayBuffer) -> bool:
    """Whether `buffer[i]` returns its stored rows unchanged (no frame stacking, no rebuilt obs_next)."""
    options = getattr(buffer, "options", {})
    return (
        type(buffer).__getitem__ in _PLAIN_GETITEM
        and buffer.stack_num == 1
        and not options.get("ignore_obs_next", False)
        and not options.get("save_only_last_obs", False)
    )


def read_transitions(buffer: ReplayBuffer) -> StoredTransitions:
    """Every valid transition of `buffer` in Tianshou's order; a buffer whose slots are already in
    that order (a full or never-wrapped `ReplayBuffer`, what the loaders build) is sliced, not copied."""
    if isinstance(buffer, HERReplayBuffer | HERReplayBufferManager):
        raise DatasetError(
            "HER buffers relabel goals each time they are sampled, which a staged offline dataset cannot "
            "reproduce; relabel the data first and train from a plain ReplayBuffer"
        )
    indices = stored_indices(buffer)
    if len(indices) == 0:
        raise DatasetError("the replay buffer holds no transitions")
    if _reads_raw_columns(buffer):
        stored = buffer_columns(buffer)
        rows = slice(0, len(indices)) if _is_identity(indices) else indices  # a slice is a view
        columns = {key: np.asarray(stored[key][rows]) for key in COLUMNS}
    else:
        batch = buffer[indices]
        columns = {key: np.asarray(batch[key]) for key in COLUMNS}
    return StoredTransitions(**columns, episode_end=episode_ends(buffer, indices), indices=indices)


def episode_ends(buffer: ReplayBuffer, indices: np.ndarray) -> np.ndarray:
    """Whether each transition at `indices` is the last its episode has in the buffer: `done`, or the
    newest step of a (sub-)buffer whose episode still runs (no next step to follow it there)."""
    ends = np.asarray(buffer.done[indices], dtype=bool).copy()
    ends[np.isin(indices, buffer.unfinished_index())] = True
    return ends


def monte_carlo_returns(rewards: np.ndarray, episode_end: np.ndarray, gamma: float) -> np.ndarray:
    """Discounted return to the end of each transition's episode, Σ_k γ^k r_{t+k}, with rows in
    buffer order (episodes contiguous, `episode_end` on each one's last row); no bootstrap."""
    size = len(rewards)
    flags = Batch(
        rew=np.asarray(rewards, dtype=np.float64).reshape(size),
        terminated=np.asarray(episode_end, dtype=bool),
        truncated=np.zeros(size, dtype=bool),
    )
    # Tianshou's GAE with λ = 1 and all values 0 is exactly the return-to-go (a compiled loop).
    returns, _ = Algorithm.compute_episodic_return(
        flags,  # type: ignore[arg-type]
        _NO_UNFINISHED,  # type: ignore[arg-type]
        np.arange(size),
        gamma=gamma,
        gae_lambda=1.0,
    )
    return np.asarray(returns, dtype=np.float32)


def failures_forever(
    returns: np.ndarray, rewards: np.ndarray, episode_end: np.ndarray, failed: float, gamma: float
) -> np.ndarray:
    """Cal-QL on a sparse reward (CORL's `is_sparse_reward`, after the authors' code): an episode whose last
    reward is `failed` (the reward short of the goal, as the critic learns it) never reached the goal, and
    each of its steps takes failed/(1 − γ), the return of failing forever, in place of its finite sum."""
    ends = np.flatnonzero(np.asarray(episode_end, dtype=bool))
    starts = np.concatenate(([0], ends[:-1] + 1))
    returns = returns.copy()
    for start, end in zip(starts, ends, strict=True):
        if np.isclose(rewards[end], failed):
            returns[start : end + 1] = failed / (1.0 - gamma)
    return returns


class _NoUnfinishedEpisodes:
    """`compute_episodic_return` asks a buffer for its running episodes; `episode_end` already has them."""

    @staticmethod
    def unfinished_index() -> np.ndarray:
        return np.empty(0, dtype=np.int64)


_NO_UNFINISHED = _NoUnfinishedEpisodes()


def buffer_fingerprint(buffer: ReplayBuffer) -> tuple[int, int, int, bytes]:
    """Changes whenever transitions are added, the storage is replaced or another buffer is passed.
    (Values edited in place are not seen; `process_buffer` re-stages on every training run.)"""
    return (id(buffer), len(buffer), id(buffer_columns(buffer)), np.asarray(buffer.last_index).tobytes())


def is_prioritized(buffer: ReplayBuffer) -> bool:
    """A prioritized buffer: sample by its priorities, weight the loss, send back new priorities."""
    return isinstance(buffer, PrioritizedReplayBuffer)


class Transitions(NamedTuple):
    """A prepared batch of continuous-action transitions: normalised observations, actions in the
    policy's [-1, 1] box, rewards as the critics learn them, 1 − terminated, normalised next
    observations, and (Cal-QL only) the Monte-Carlo return from each state."""

    obs: torch.Tensor
    act: torch.Tensor
    rew: torch.Tensor
    not_terminated: torch.Tensor
    obs_next: torch.Tensor
    mc_return: torch.Tensor | None = None


class TransitionsWithNextActions(NamedTuple):
    """A prepared batch with the data's own action at each s′ (ReBRAC's critic penalty)."""

    transitions: Transitions
    next_act: torch.Tensor
    """(B, A): the action the data took at s′, in the policy's box (any value where unknown)."""
    next_act_known: torch.Tensor
    """(B,): 1 where the episode goes on in the data after this step, 0 at its last step (a time-out's
    s′ has no action in the data; a terminal's needs none)."""


@dataclass(frozen=True)
class TransitionPreparation:
    """How raw columns become what the losses take (`Transitions`)."""

    normalize_obs: Callable[[torch.Tensor], torch.Tensor]
    action_low: torch.Tensor
    action_high: torch.Tensor
    clip_actions: bool
    reward_scale: float
    reward_bias: float

    def to_policy_actions(self, actions: torch.Tensor, *, env_units: bool = True) -> torch.Tensor:
        """Actions in the policy's [-1, 1] box: environment units go through the inverse of
        `SACPolicy`'s action scaling; policy units pass unchanged."""
        if env_units:
            actions = 2.0 * (actions - self.action_low) / (self.action_high - self.action_low) - 1.0
        return actions.clamp(-1.0, 1.0) if self.clip_actions else actions

    @torch.no_grad()
    def __call__(
        self,
        obs: torch.Tensor,
        act: torch.Tensor,
        rew: torch.Tensor,
        terminated: torch.Tensor,
        obs_next: torch.Tensor,
        *,
        env_units: bool = True,
        reward_unit: float = 1.0,
    ) -> Transitions:
        """`env_units` says where the actions live; `reward_unit` multiplies rewards before the scale
        and the bias (`--normalize-reward`'s factor)."""
        size = rew.shape[0]
        return Transitions(
            self.normalize_obs(obs.reshape(size, -1)),
            self.to_policy_actions(act.reshape(size, -1), env_units=env_units),
            rew.reshape(size) * (reward_unit * self.reward_scale) + self.reward_bias,
            1.0 - terminated.reshape(size),
            self.normalize_obs(obs_next.reshape(size, -1)),
        )


class DeviceDataset:
    """Every transition of a replay buffer, prepared once and held on one device, ready for indexing:
    batches are drawn there, with no host round trip per update."""

    def __init__(
        self,
        stored: StoredTransitions,
        prepare: TransitionPreparation,
        device: torch.device,
        *,
        env_units: bool,
        reward_unit: float,
        mc_gamma: float | None,
        next_actions: bool = False,
        n_step: tuple[int, float] | None = None,
        failure_reward: float | None = None,
    ) -> None:
        def column(array: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(np.asarray(array), dtype=torch.float32).to(device)

        columns = map(column, (stored.obs, stored.act, stored.rew, stored.terminated, stored.obs_next))
        prepared = prepare(*columns, env_units=env_units, reward_unit=reward_unit)
        self.obs, self.act, self.rew, self.not_terminated, self.obs_next, _ = prepared
        self.reward_unit = reward_unit
        """The factor rewards were multiplied by before the scale and the bias."""
        self.mc_return = None
        if mc_gamma is not None:  # from the rewards the critic learns (scaled), to each episode's end
            rewards = self.rew.cpu().numpy()
            returns = monte_carlo_returns(rewards, stored.episode_end, mc_gamma)
            if failure_reward is not None:
                failed = failure_reward * reward_unit * prepare.reward_scale + prepare.reward_bias
                returns = failures_forever(returns, rewards, stored.episode_end, failed, mc_gamma)
            self.mc_return = torch.as_tensor(returns).to(device)
        self.size = len(stored.indices)
        self.indices = stored.indices
        if n_step is not None and n_step[0] > 1:
            self.rew, self.not_terminated, self.obs_next = n_step_columns(
                self.rew, self.not_terminated, self.obs_next, stored.episode_end, *n_step
            )
        self._row_of: np.ndarray | None = None
        self.next_act: torch.Tensor | None = None
        self.next_act_known: torch.Tensor | None = None
        if next_actions:  # rows are in buffer order: within an episode, row k + 1 is the step after row k
            following = torch.arange(1, self.size + 1, device=device).clamp(max=self.size - 1)
            self.next_act = self.act[following]
            self.next_act_known = column(~np.asarray(stored.episode_end, dtype=bool))

    def sample(self, batch_size: int) -> Transitions | TransitionsWithNextActions:
        return self.take(torch.randint(self.size, (batch_size,), device=self.obs.device))

    def take(self, rows: torch.Tensor) -> Transitions | TransitionsWithNextActions:
        mc_return = None if self.mc_return is None else self.mc_return[rows]
        transitions = Transitions(
            self.obs[rows], self.act[rows], self.rew[rows], self.not_terminated[rows], self.obs_next[rows], mc_return
        )
        if self.next_act is None or self.next_act_known is None:
            return transitions
        return TransitionsWithNextActions(transitions, self.next_act[rows], self.next_act_known[rows])

    def rows_of(self, indices: np.ndarray) -> torch.Tensor:
        """Staged rows of buffer indices (what a prioritized buffer's `sample_indices` returns)."""
        if self._row_of is None:
            self._row_of = np.full(int(self.indices.max()) + 1, -1, dtype=np.int64)
            self._row_of[self.indices] = np.arange(self.size)
        return torch.as_tensor(self._row_of[indices], device=self.obs.device)


def n_step_columns(
    rew: torch.Tensor,
    not_terminated: torch.Tensor,
    obs_next: torch.Tensor,
    episode_end: np.ndarray,
    horizon: int,
    gamma: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """n-step returns: from each row, the k ≤ `horizon` steps to the horizon or its episode's end give
    R = Σ_{j<k} γ^j r_{t+j}, the observation after the last of them, and its bootstrap weight
    γ^(k−1)·(1 − terminated) in the `not_terminated` column, so that the usual target r + γ·(1 − d)·V(s′)
    reads R + γ^k·(1 − terminated)·V(s_{t+k}). Episodes are never bridged; a time-out bootstraps."""
    size = rew.shape[0]
    ends = torch.as_tensor(np.asarray(episode_end, dtype=bool), device=rew.device)
    last = torch.arange(size, device=rew.device)
    total, scale = rew.clone(), torch.ones_like(rew)
    going_on = ~ends  # the row's episode goes on after the window's last step
    for _ in range(1, horizon):
        following = torch.where(going_on, last + 1, last).clamp(max=size - 1)
        scale = torch.where(going_on, scale * gamma, scale)
        total = torch.where(going_on, total + scale * rew[following], total)
        last = following
        going_on = going_on & ~ends[last]
    return total, scale * not_terminated[last], obs_next[last]


def stage_continuous(
    buffer: ReplayBuffer,
    prepare: TransitionPreparation,
    device: torch.device,
    *,
    action_scaling: bool,
    fit_normalizer: Callable[[np.ndarray], None] | None,
    normalize_reward: bool,
    mc_gamma: float | None,
    select: Callable[[StoredTransitions], np.ndarray | None] | None = None,
    next_actions: bool = False,
    n_step: tuple[int, float] | None = None,
    failure_reward: float | None = None,
) -> DeviceDataset:
    """A continuous-action buffer on `device`: its action units read from its marker
    (`offline_rl.data.action_units`), the observation normaliser fitted on it (`fit_normalizer`, when
    given), CORL's reward unit where `normalize_reward`, and the Monte-Carlo returns Cal-QL floors at
    (`mc_gamma`, when given). `select` picks the rows to stage (all of them when it gives None),
    before the normaliser is fitted. `next_actions` stages the data's action at each s′ too; `n_step` (horizon, γ)
    stages n-step returns in place of rewards; `failure_reward` (a raw reward) marks the episodes ending on it
    as failures for the Monte-Carlo returns (`failures_forever`)."""
    stored = read_transitions(buffer)
    rows = select(stored) if select is not None else None
    if rows is not None:
        stored = select_rows(stored, rows)
    env_units = needs_action_scaling(
        buffer,
        stored.act,
        prepare.action_low.cpu().numpy(),
        prepare.action_high.cpu().numpy(),
        action_scaling=action_scaling,
        clipped=prepare.clip_actions,
    )
    if fit_normalizer is not None:
        fit_normalizer(stored.obs.reshape(len(stored.obs), -1))
    reward_unit = 1.0
    if normalize_reward:
        finished = np.asarray(buffer.done[stored.indices], dtype=bool)
        reward_unit = corl_reward_unit(stored.rew, stored.episode_end, finished)
    return DeviceDataset(
        stored,
        prepare,
        device,
        env_units=env_units,
        reward_unit=reward_unit,
        mc_gamma=mc_gamma,
        next_actions=next_actions,
        n_step=n_step,
        failure_reward=failure_reward,
    )
