"""Training statistics derived from their dataclass declaration, summed on the device and read once
per logging window, and the check that stops a run whose figures or weights stopped being finite."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Generic, TypeVar

import numpy as np
import torch
from tianshou.algorithm.algorithm_base import TrainingStats

from offline_rl.core.errors import TrainingDiverged

Stats = TypeVar("Stats", bound=TrainingStats)


@functools.cache
def stat_names(stats_class: type[TrainingStats]) -> tuple[str, ...]:
    """The figures a statistics dataclass declares (beyond Tianshou's own timing fields)."""
    inherited = {field.name for field in dataclasses.fields(TrainingStats)}
    return tuple(field.name for field in dataclasses.fields(stats_class) if field.name not in inherited)


def stat_vector(stats_class: type[TrainingStats], values: dict[str, torch.Tensor]) -> torch.Tensor:
    """The declared figures, in declaration order, as one device vector (from 0-d tensors by name)."""
    return torch.stack([values[name].detach().reshape(()).float() for name in stat_names(stats_class)])


def stats_from_numbers(stats_class: type[Stats], numbers: list[float]) -> Stats:
    return stats_class(**dict(zip(stat_names(stats_class), numbers, strict=True)))


def stats_from_tensors(stats_class: type[Stats], values: dict[str, torch.Tensor]) -> Stats:
    """Build the statistics from 0-d tensors keyed by the declared names, in one device-to-host copy."""
    return stats_from_numbers(stats_class, stat_vector(stats_class, values).tolist())


def unlogged_stats(stats_class: type[Stats]) -> Stats:
    """Statistics before the first window closes: NaN, which Tianshou's moving averages skip (they
    compare against `np.nan` itself, so it must be that object)."""
    return stats_class(**dict.fromkeys(stat_names(stats_class), np.nan))


class StatisticsWindow(Generic[Stats]):
    """Per-update statistics summed on the device and read on the host once every `interval` updates.

    Why: reading a number computed on a GPU waits for every kernel queued before it, so reading the
    statistics of every update would stop the host from running ahead of the device. Windows are
    aligned to the run's update count (updates `k·interval + 1 … (k+1)·interval`), so a resumed run
    logs at the same steps as an uninterrupted one; the figures of a window are its mean.
    """

    def __init__(self, stats_class: type[Stats], interval: int = 1) -> None:
        self.stats_class = stats_class
        self.interval = interval
        self._sum: torch.Tensor | None = None
        self._count = 0
        self.latest: Stats = unlogged_stats(stats_class)
        self.fresh = False

    def add(self, values: dict[str, torch.Tensor]) -> None:
        """Add one update's figures to the sum (device work only; may run inside a CUDA graph)."""
        vector = stat_vector(self.stats_class, values)
        if self._sum is None:
            self._sum = torch.zeros_like(vector)
        self._sum.add_(vector)

    def count(self, updates_done: int) -> Stats:
        """Count one update on the host; at the end of a window read the mean in one transfer. Returns
        a fresh statistics object (Tianshou's trainer writes into it) with the latest window's mean."""
        self._count += 1
        if updates_done % self.interval == 0 and self._sum is not None:
            numbers = (self._sum / self._count).tolist()
            first = updates_done - self._count + 1
            self._sum.zero_()
            self._count = 0
            require_finite_statistics(stat_names(self.stats_class), numbers, first, updates_done)
            self.latest = stats_from_numbers(self.stats_class, numbers)
            self.fresh = True
        return dataclasses.replace(self.latest)

    def take_fresh(self) -> bool:
        """Whether a window closed since the last call (the logger writes only those)."""
        fresh, self.fresh = self.fresh, False
        return fresh


def require_finite_statistics(names: Sequence[str], numbers: Sequence[float], first: int, last: int) -> None:
    """Stop at the first window whose figures hold a NaN or an infinity (`TrainingDiverged`).

    Why here: the window's figures are already on the host, so the check costs nothing, and it runs
    every `--log-interval` updates rather than after hours of updates on NaN weights."""
    bad = [f"{name} {value}" for name, value in zip(names, numbers, strict=True) if not math.isfinite(value)]
    if bad:
        span = f"update {last}" if first == last else f"updates {first}-{last}"
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        raise TrainingDiverged(f"training diverged: {', '.join(bad[:3])}{more} (mean of {span})")


def non_finite_tensors(module: torch.nn.Module) -> list[str]:
    """The names of `module`'s floating-point parameters and buffers holding a NaN or +inf, read in
    one device-to-host transfer. (−inf is allowed: log α = −inf is how α = 0 is stored.)"""
    named = [
        (name, tensor)
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]
        if tensor.is_floating_point()
    ]
    if not named:
        return []
    broken = torch.stack([(tensor.isnan() | tensor.isposinf()).any() for _, tensor in named]).tolist()
    return [name for (name, _), bad in zip(named, broken, strict=True) if bad]
