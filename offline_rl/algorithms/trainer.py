"""The trainers behind `algorithm.run_training(...)` for offline_rl's algorithms and runs.

`WindowedOfflineTrainer`: Tianshou's `OfflineTrainer` with its per-update bookkeeping done once per
statistics window. Why: with an update replayed as one CUDA graph, the host has well under a
millisecond per update, and Tianshou 2.0.1's trainer spends about as much again on figures that change
only when a window closes: a moving average of every statistic (two `np.mean` over 100 values each,
per statistic, per update), a deep copy of the statistics for the logger, and a progress-bar redraw
forced by `set_postfix`. The host then sets the pace instead of the GPU. Here the moving averages and
the logger are fed when the algorithm closes a window (every update with the default window of 1,
exactly as Tianshou does), and the bar's postfix is shown at the bar's own refresh rate. Parameters,
epochs, evaluation, checkpoints and the returned `InfoStats` are Tianshou's. One logged curve changes
meaning with windows longer than one update: Tianshou's `update/smoothed_loss/*` becomes a moving
average over the last 100 windows (fed per update, it averaged 100 copies of mostly one window's mean).

`StopsBetweenSteps` (in both it and `StoppableOffPolicyTrainer`, the online behaviour trainer's):
where the logger offers `save_mid_epoch` (a run folder's logger, `offline_rl.runs.folder`), Ctrl-C
and SIGTERM during training wait for the training step under way (an update offline; a collection
and its updates online) to end; the logger then saves where the run is (the epochs done and the
steps into the next, in the epoch's own unit: updates offline, env steps online), and the stop goes
on. A stop during an evaluation is at once: the epoch's checkpoint, written before its evaluation,
re-runs it on resume. A run resumed from a mid-epoch save (the logger's `epoch_steps_done`) trains
the rest of that epoch, without the evaluation Tianshou makes before training: the uninterrupted run
made none there.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import tqdm
from tianshou.algorithm.algorithm_base import TrainingStats
from tianshou.data import CollectStats
from tianshou.trainer import OfflineTrainer, OffPolicyTrainer

from offline_rl.core.interrupts import DeferredStop, stops_deferred


class _BarWithLazyPostfix(tqdm.tqdm):
    """A tqdm bar whose postfix waits for the next regular refresh instead of forcing one."""

    def set_postfix(self, ordered_dict: Any = None, refresh: bool = True, **kwargs: Any) -> None:
        super().set_postfix(ordered_dict, refresh=False, **kwargs)


class StopsBetweenSteps:
    """A Tianshou trainer that stops between two training steps and goes on from there (see the module
    docstring). Mixed in before the trainer class it extends."""

    _stop: DeferredStop | None = None
    _into_epoch: int | None = None
    """Resumed mid-epoch: the steps its epoch had done (until the first step after the resume)."""
    _progress: int = 0
    """The steps the epoch under way has done, in its own unit."""

    def run(self, reset_collectors: bool = True, reset_collector_buffers: bool = False) -> Any:
        if getattr(self._logger, "save_mid_epoch", None) is None:
            return super().run(reset_collectors, reset_collector_buffers)
        with stops_deferred() as stop:
            self._stop = stop
            try:
                return super().run(reset_collectors, reset_collector_buffers)
            finally:
                self._stop = None

    def reset(self, reset_collectors: bool = True, reset_collector_buffers: bool = False) -> None:
        self._into_epoch = getattr(self._logger, "epoch_steps_done", None) if self.params.resume_from_log else None
        super().reset(reset_collectors, reset_collector_buffers)

    def execute_epoch(self) -> Any:
        self._progress = self._into_epoch or 0
        return super().execute_epoch()

    def _training_step(self) -> Any:
        if self._stop is not None and self._stop.requested:
            done = self._current_update_step - 1  # Tianshou counts a step before taking it; this one is not taken
            self._logger.save_mid_epoch(self._epoch - 1, self._env_step, done, self._progress)
            self._stop.raise_if_requested()
        step = super()._training_step()
        self._progress += step.get_steps_in_epoch_advancement()
        if self._into_epoch:  # the epoch's steps done before the resume count towards it
            step = _StepAfterResume(step, step.get_steps_in_epoch_advancement() + self._into_epoch)
        self._into_epoch = None
        return step

    def _test_step(self, force_update_best: bool = False, log_msg_prefix: str | None = None) -> Any:
        if force_update_best and self._into_epoch is not None:  # resumed mid-epoch: nothing to evaluate yet
            self._best_score = -math.inf
            return CollectStats(), False
        if self._stop is None:
            return super()._test_step(force_update_best, log_msg_prefix)
        self._stop.raise_if_requested()  # one during the epoch's last update: its checkpoint is written
        self._stop.deferring = False
        try:
            return super()._test_step(force_update_best, log_msg_prefix)
        finally:
            self._stop.deferring = True


class WindowedOfflineTrainer(StopsBetweenSteps, OfflineTrainer):
    """`OfflineTrainer` for an algorithm with a `statistics` window (`offline_rl.algorithms.base`).

    Overrides the private hooks listed in `offline_rl.core.compat.TRAINER_HOOKS` (checked there)."""

    def _update_moving_avg_stats_and_log_update_data(self, update_stat: TrainingStats) -> None:
        if self.algorithm.statistics.take_fresh():  # a window closed at this update
            super()._update_moving_avg_stats_and_log_update_data(update_stat)

    @property
    def _pbar(self) -> Callable[..., tqdm.tqdm]:
        return partial(_BarWithLazyPostfix, dynamic_ncols=True, ascii=True, disable=not self.params.show_progress)


class StoppableOffPolicyTrainer(StopsBetweenSteps, OffPolicyTrainer):
    """Tianshou's `OffPolicyTrainer` (the online behaviour trainer's) stopping between two steps."""


class _StepAfterResume:
    """The first step of a run resumed mid-epoch, advancing the epoch by the steps done before too."""

    def __init__(self, step: Any, advancement: int) -> None:
        self._step, self._advancement = step, advancement

    def get_steps_in_epoch_advancement(self) -> int:
        return self._advancement

    def __getattr__(self, name: str) -> Any:
        return getattr(self._step, name)
