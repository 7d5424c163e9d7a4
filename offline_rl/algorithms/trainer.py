"""The trainer behind `algorithm.run_training(OfflineTrainerParams(...))` for offline_rl's algorithms:
Tianshou's `OfflineTrainer`, with its per-update bookkeeping done once per statistics window.

Why: with an update replayed as one CUDA graph, the host has well under a millisecond per update,
and Tianshou 2.0.1's trainer spends about as much again on figures that change only when a window
closes: a moving average of
every statistic (two `np.mean` over 100 values each, per statistic, per update), a deep copy of the
statistics for the logger, and a progress-bar redraw forced by `set_postfix`. The host then sets the
pace instead of the GPU. Here the moving averages and the logger are fed when the algorithm closes
a window (every update with the default window of 1, exactly as Tianshou does), and the bar's
postfix is shown at the bar's own refresh rate. Parameters, epochs, evaluation, checkpoints and
the returned `InfoStats` are Tianshou's. One logged curve changes meaning with windows longer than
one update: Tianshou's `update/smoothed_loss/*` becomes a moving average over the last 100 windows
(fed per update, it averaged 100 copies of mostly one window's mean).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import tqdm
from tianshou.algorithm.algorithm_base import TrainingStats
from tianshou.trainer import OfflineTrainer


class _BarWithLazyPostfix(tqdm.tqdm):
    """A tqdm bar whose postfix waits for the next regular refresh instead of forcing one."""

    def set_postfix(self, ordered_dict: Any = None, refresh: bool = True, **kwargs: Any) -> None:
        super().set_postfix(ordered_dict, refresh=False, **kwargs)


class WindowedOfflineTrainer(OfflineTrainer):
    """`OfflineTrainer` for an algorithm with a `statistics` window (`offline_rl.algorithms.base`).

    Overrides the private hooks listed in `offline_rl.core.compat.TRAINER_HOOKS` (checked there)."""

    def _update_moving_avg_stats_and_log_update_data(self, update_stat: TrainingStats) -> None:
        if self.algorithm.statistics.take_fresh():  # a window closed at this update
            super()._update_moving_avg_stats_and_log_update_data(update_stat)

    @property
    def _pbar(self) -> Callable[..., tqdm.tqdm]:
        return partial(_BarWithLazyPostfix, dynamic_ncols=True, ascii=True, disable=not self.params.show_progress)
