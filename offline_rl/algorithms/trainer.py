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

import contextlib
import math
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from typing import Any

import tqdm
from tianshou.algorithm.algorithm_base import TrainingStats
from tianshou.data import CollectStats
from tianshou.trainer import OfflineTrainer, OffPolicyTrainer
from tianshou.utils import LazyLogger

from offline_rl.core.errors import TrainingDiverged
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


class LogsClosedWindows:
    """A Tianshou trainer of an algorithm with a `statistics` window (`offline_rl.algorithms.base`): its
    moving averages and logger are fed as a window closes. Mixed in before the trainer class it extends;
    overrides the private hooks listed in `offline_rl.core.compat.TRAINER_HOOKS` (checked there)."""

    def _update_moving_avg_stats_and_log_update_data(self, update_stat: TrainingStats) -> None:
        if self.algorithm.statistics.take_fresh():  # type: ignore[attr-defined]  # a window closed at this update
            super()._update_moving_avg_stats_and_log_update_data(update_stat)  # type: ignore[misc]

    @property
    def _pbar(self) -> Callable[..., tqdm.tqdm]:
        shown = self.params.show_progress  # type: ignore[attr-defined]
        return partial(_BarWithLazyPostfix, dynamic_ncols=True, ascii=True, disable=not shown)


class WindowedOfflineTrainer(StopsBetweenSteps, LogsClosedWindows, OfflineTrainer):
    """`OfflineTrainer` for an algorithm with a `statistics` window, stopping between two steps."""


class StoppableOffPolicyTrainer(StopsBetweenSteps, OffPolicyTrainer):
    """Tianshou's `OffPolicyTrainer` (the online behaviour trainer's) stopping between two steps."""


class WindowedOffPolicyTrainer(StopsBetweenSteps, LogsClosedWindows, OffPolicyTrainer):
    """`OffPolicyTrainer` for an algorithm with a `statistics` window (an offline algorithm fine-tuned
    online), stopping between two steps."""


class _StepAfterResume:
    """The first step of a run resumed mid-epoch, advancing the epoch by the steps done before too."""

    def __init__(self, step: Any, advancement: int) -> None:
        self._step, self._advancement = step, advancement

    def get_steps_in_epoch_advancement(self) -> int:
        return self._advancement

    def __getattr__(self, name: str) -> Any:
        return getattr(self._step, name)


class SeedsTrainer(WindowedOfflineTrainer):
    """The trainer of a seed batch (`offline_rl.algorithms.seeds`): it drives the batch's stacked copy
    through Tianshou's offline trainer, and keeps one `WindowedOfflineTrainer` per seed (`followers`,
    each with its seed's run folder: its logger, evaluation collector, checkpoint and best-policy hooks)
    in step with it, without running their loops: after each update a follower logs its seed's closed
    statistics window; after each epoch every follower writes its checkpoint, then every follower
    evaluates its seed. Each seed's folder is thus what a single run of that seed writes.

    A seed whose statistics turn non-finite (or whose weights do, at a checkpoint) is handed to
    `on_diverged(index, error)` and leaves the batch; the others train on. The driver's own logger is
    none: a stop's mid-epoch checkpoint, and a resume's counters, are the followers' (all in step).
    """

    def __init__(
        self,
        algorithm: Any,
        params: Any,
        followers: list[WindowedOfflineTrainer],
        on_diverged: Callable[[int, TrainingDiverged], None],
        checkpoint_round: Callable[[], Any] = contextlib.nullcontext,
    ) -> None:
        super().__init__(algorithm, params)
        self.followers = followers
        self.on_diverged = on_diverged
        self.checkpoint_round = checkpoint_round
        """A context around each round of the seeds' checkpoints (the run folders keep the previous
        ones until every seed's new one is written)."""
        self._logger = _FollowersRecord(self)

    def reset(self, reset_collectors: bool = True, reset_collector_buffers: bool = False) -> None:
        super().reset(reset_collectors, reset_collector_buffers)
        for follower in self.followers:  # each makes its seed's first evaluation, as a single run does
            follower._stop = self._stop
            self._guarded(follower, lambda each: each.reset(reset_collectors, reset_collector_buffers))

    def _training_step(self) -> Any:
        step = super()._training_step()
        diverged = self.algorithm.statistics.diverged  # found as a window closes
        for index in sorted(diverged, reverse=True):
            self._drop(index, TrainingDiverged(diverged[index]))
        for follower in self.followers:
            if follower.algorithm.statistics.fresh:  # its seed's window closed at this update: log it
                self._sync(follower)
                follower._update_moving_avg_stats_and_log_update_data(follower.algorithm.statistics.latest)
        return step

    def execute_epoch(self) -> Any:
        stats = super().execute_epoch()
        if self._stop_fn_flag:
            return stats
        with self.checkpoint_round():  # every checkpoint first: all hold the same generators' state
            for follower in list(self.followers):
                self._sync(follower)
                self._guarded(follower, _save_checkpoint)
        for follower in list(self.followers):
            self._guarded(follower, lambda each: each._test_step())
        for follower in self.followers:
            follower._logger.log_info_data(asdict(follower._create_info_stats()), follower._epoch)
        return stats

    def _sync(self, follower: WindowedOfflineTrainer) -> None:
        follower._epoch, follower._env_step = self._epoch, self._env_step
        follower._current_update_step = self._current_update_step

    def _guarded(self, follower: WindowedOfflineTrainer, action: Callable[[WindowedOfflineTrainer], Any]) -> None:
        """`action(follower)`; a divergence it finds (non-finite weights at a checkpoint) drops that seed."""
        try:
            action(follower)
        except TrainingDiverged as error:
            self._drop(self.followers.index(follower), error)

    def _drop(self, index: int, error: TrainingDiverged) -> None:
        follower = self.followers.pop(index)
        self.algorithm.seed_batch.remove(follower.algorithm)
        self.on_diverged(index, error)
        if not self.followers:
            raise TrainingDiverged("training diverged: every seed of the batch")


def _save_checkpoint(trainer: Any) -> None:
    """What Tianshou's trainer does after an epoch's updates: its logger's `save_data`, which calls the
    run folder's checkpoint hook."""
    counters = (trainer._epoch, trainer._env_step, trainer._current_update_step)
    trainer._logger.save_data(*counters, trainer.params.save_checkpoint_fn)


class _FollowersRecord(LazyLogger):
    """The driver's logger: it logs nothing (the followers do); a stop between updates saves every
    follower's mid-epoch checkpoint, and a resume starts from the first follower's counters."""

    def __init__(self, trainer: SeedsTrainer) -> None:
        super().__init__()
        self.trainer = trainer
        first = trainer.followers[0]._logger
        self.epoch_steps_done = getattr(first, "epoch_steps_done", None)
        self.save_mid_epoch = self._save_mid_epoch if hasattr(first, "save_mid_epoch") else None

    def _save_mid_epoch(self, epoch: int, env_step: int, gradient_step: int, epoch_steps_done: int) -> None:
        with self.trainer.checkpoint_round():
            for follower in self.trainer.followers:
                follower._logger.save_mid_epoch(epoch, env_step, gradient_step, epoch_steps_done)

    def restore_data(self) -> tuple[int, int, int]:
        return self.trainer.followers[0]._logger.restore_data()
