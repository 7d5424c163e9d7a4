"""What both offline algorithms share, written once: the update counter, the device, the timed
`update()` wrapper, and training statistics derived from their dataclass declaration."""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Generic, TypeVar

import torch
from tianshou.algorithm.algorithm_base import OfflineAlgorithm, TrainingStats
from tianshou.data import ReplayBuffer
from tianshou.utils.torch_utils import torch_train_mode

Stats = TypeVar("Stats", bound=TrainingStats)
PolicyT = TypeVar("PolicyT")


@functools.cache
def stat_names(stats_class: type[TrainingStats]) -> tuple[str, ...]:
    """The figures a statistics dataclass declares (beyond Tianshou's own timing fields)."""
    inherited = {field.name for field in dataclasses.fields(TrainingStats)}
    return tuple(field.name for field in dataclasses.fields(stats_class) if field.name not in inherited)


def stats_from_tensors(stats_class: type[Stats], values: dict[str, torch.Tensor]) -> Stats:
    """Build the statistics from 0-d tensors keyed by the declared names, in one device-to-host copy."""
    names = stat_names(stats_class)
    numbers = torch.stack([values[name].detach().reshape(()).float() for name in names]).tolist()
    return stats_class(**dict(zip(names, numbers, strict=True)))


class CountedOfflineAlgorithm(OfflineAlgorithm[PolicyT], Generic[PolicyT]):  # type: ignore[type-var]
    """A Tianshou `OfflineAlgorithm` that counts its updates in its state (so checkpoints restore the
    count) while keeping a host-side mirror (reading the device copy each update would sync)."""

    def __init__(self, *, policy: Any) -> None:
        super().__init__(policy=policy)
        self.register_buffer("num_updates", torch.zeros((), dtype=torch.long))
        self._host_updates = 0

    @property
    def device(self) -> torch.device:
        return self.num_updates.device

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        result = super().load_state_dict(state_dict, strict=strict, assign=assign)
        self._host_updates = int(self.num_updates)
        return result

    def count_update(self) -> int:
        """Advance the counter after a gradient step; returns the new count (from the host mirror)."""
        with torch.no_grad():
            self.num_updates += 1
        self._host_updates += 1
        return self._host_updates

    def update(self, buffer: ReplayBuffer, sample_size: int | None) -> Any:
        """One gradient step from `buffer`, timed, inside Tianshou's training-step contract."""
        if not self.policy.is_within_training_step:
            raise RuntimeError("update() must run inside a training step (see policy_within_training_step)")
        start = time.time()
        with torch_train_mode(self):
            stats = self.update_from_buffer(buffer, sample_size)
        for scheduler in self.lr_schedulers:
            scheduler.step()
        stats.train_time = time.time() - start
        return stats

    def update_from_buffer(self, buffer: ReplayBuffer, sample_size: int | None) -> Any:
        """The algorithm's own step: draw a batch of `sample_size` from `buffer` and learn from it."""
        raise NotImplementedError
