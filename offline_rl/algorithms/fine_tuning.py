"""What a continuous algorithm learns from while it is fine-tuned online: the offline data staged on the
device, and the transitions collected in the env since the switch, drawn together in each batch.

The online transitions are collected by Tianshou's off-policy trainer into its replay (which a checkpoint
keeps, `offline_rl.runs.online`); before each update the ones added since the last are prepared as the
offline ones were (the same observation normaliser, reward unit, scale and bias; actions already in the
policy's box) and copied into device tensors of a fixed size. A batch is then drawn on the device from
both: a fixed share from the offline data (`mixing_ratio`, CORL's Cal-QL), or every row from the two
together as from one buffer (None, CORL's CQL and IQL). Nothing a batch is drawn from changes shape, so
on CUDA the update stays one captured graph while the online part fills.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from offline_rl.algorithms.staging import DeviceDataset, TransitionPreparation, Transitions


class OnlineTransitions:
    """The transitions collected while fine-tuning, prepared, in device tensors of `capacity` rows of which
    the first `size` are filled (`count` holds the same number on the device, for the draws)."""

    def __init__(self, capacity: int, like: DeviceDataset) -> None:
        def empty(column: torch.Tensor) -> torch.Tensor:
            return torch.zeros((capacity, *column.shape[1:]), dtype=column.dtype, device=column.device)

        self.capacity = capacity
        self.obs, self.act, self.obs_next = empty(like.obs), empty(like.act), empty(like.obs_next)
        self.rew, self.not_terminated = empty(like.rew), empty(like.not_terminated)
        self.count = torch.zeros((), dtype=torch.float32, device=like.obs.device)
        self.size = 0

    def extend(self, rows: Transitions) -> None:
        """Append prepared rows (refused past `capacity`: the fine-tuning collects no more than that)."""
        start, stop = self.size, self.size + rows.rew.shape[0]
        if stop > self.capacity:
            raise ValueError(f"{stop} online transitions, more than the {self.capacity} the fine-tuning collects")
        for target, source in zip(
            (self.obs, self.act, self.rew, self.not_terminated, self.obs_next), rows[:5], strict=True
        ):
            target[start:stop].copy_(source)
        self.size = stop
        self.count.fill_(stop)

    def take(self, rows: torch.Tensor) -> Transitions:
        return Transitions(
            self.obs[rows], self.act[rows], self.rew[rows], self.not_terminated[rows], self.obs_next[rows]
        )

    def draw_rows(self, batch_size: int) -> torch.Tensor:
        """`batch_size` filled rows drawn uniformly on the device."""
        drawn = torch.rand(batch_size, device=self.obs.device) * self.count
        return drawn.long().clamp_(max=self.capacity - 1)


class FineTuningData:
    """The offline data and the online transitions, each batch drawn from both (see the module docstring)."""

    def __init__(self, offline: DeviceDataset, capacity: int, mixing_ratio: float | None) -> None:
        if offline.next_act is not None:
            raise ValueError("fine-tuning draws transitions without the data's next actions")
        self.offline = offline
        self.online = OnlineTransitions(capacity, offline)
        self.mixing_ratio = mixing_ratio
        self.read = 0
        """The replay's transitions already copied to the device (a resumed run copies its restored ones first)."""

    def take_new(self, replay: Any, prepare: TransitionPreparation) -> None:
        """Copy the replay's transitions added since the last call, prepared as the offline data was.
        The replay is one env's, never wrapped (it holds all the fine-tuning's steps), so its k-th
        transition is at index k."""
        added = len(replay) - self.read
        if added <= 0:
            return
        batch = replay[np.arange(self.read, self.read + added)]
        device = self.online.obs.device
        columns = [
            torch.as_tensor(np.asarray(batch[key]), dtype=torch.float32, device=device)
            for key in ("obs", "act", "rew", "terminated", "obs_next")
        ]
        self.online.extend(prepare(*columns, env_units=False, reward_unit=self.offline.reward_unit))
        self.read += added

    def sample(self, batch_size: int) -> Transitions:
        if self.mixing_ratio is None:
            return self._sample_as_one(batch_size)
        from_offline = int(batch_size * self.mixing_ratio)  # CORL's share, rounded down
        offline_rows = torch.randint(self.offline.size, (from_offline,), device=self.online.obs.device)
        offline = self.offline.take(offline_rows)
        online = self.online.take(self.online.draw_rows(batch_size - from_offline))
        assert isinstance(offline, Transitions)
        return Transitions(*(torch.cat((a, b)) for a, b in zip(offline[:5], online[:5], strict=True)))

    def _sample_as_one(self, batch_size: int) -> Transitions:
        """Rows drawn uniformly from the offline and online transitions together: a row below the offline
        data's size is an offline one, the rest count on into the online ones."""
        size = self.offline.size
        drawn = (torch.rand(batch_size, device=self.online.obs.device) * (self.online.count + size)).long()
        is_offline = drawn < size
        offline = self.offline.take(drawn.clamp(max=size - 1))
        online = self.online.take((drawn - size).clamp_(min=0, max=self.online.capacity - 1))
        assert isinstance(offline, Transitions)

        def pick(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return torch.where(is_offline.view(-1, *([1] * (a.dim() - 1))), a, b)

        return Transitions(*(pick(a, b) for a, b in zip(offline[:5], online[:5], strict=True)))
