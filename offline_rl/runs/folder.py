"""The folder of one training run: its logs, its checkpoints, Ctrl-C, and its closing summary.

The offline trainer (`training.train_offline`) and the online behaviour trainer
(`atari_qrdqn.train_online`) both run through it, so that every example's run is laid out, saved,
resumed and summarised alike:
- a new run gets `<logdir>/<task>/<algo>/<seed>/<timestamp>/` (a folder of its own, `-2` added for
  a second run started in the same second); a resumed one writes on in the folder of the checkpoint
  it resumes from, and the trainer's epoch and step counters come back from the checkpoint (never
  from the TensorBoard events, which are written after it); one run at a time writes in a folder
  (`.lock`), so the same checkpoint resumed twice at once is refused;
- `policy.pth` at every new best trained evaluation, `checkpoint.pth` after every epoch (with
  whatever else the run must keep, `on_checkpoint`, written first so the checkpoint is the last
  word) and at a stop between two training steps (Ctrl-C, SIGTERM: `save_mid_epoch`, with the
  steps into the epoch), and `policy_last.pth` when training ends, all full checkpoints, written atomically;
- a resumed run keeps numbering its evaluations and keeps its best (`policy.pth` records it), and
  trains on exactly as the uninterrupted run would have: `checkpoint.pth` holds the random
  generators' states (`offline_rl.core.random_state`), put back as training starts again; from an
  epoch's checkpoint it makes that epoch's evaluation again (a stop may have cut it short), from
  a mid-epoch one it trains the rest of the epoch;
- Ctrl-C says how far the run got and how to continue;
- one summary line whose headline is the last evaluation, with the best labelled optimistic.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from offline_rl.algorithms.training_stats import non_finite_tensors
from offline_rl.core.errors import EXIT_USER_ERROR, OfflineRLError, TrainingDiverged
from offline_rl.core.files import FileLock, write_json
from offline_rl.core.interrupts import exit_status, interrupts_held_during
from offline_rl.core.progress import shell_quoted
from offline_rl.core.random_state import (
    RANDOM_STATE_KEY,
    capture_random_state,
    preserved_random_state,
    restore_random_state,
)
from offline_rl.runs.checkpoint import load_checkpoint, save_checkpoint
from offline_rl.runs.config import RunConfig
from offline_rl.runs.evaluation import EvaluationReporter
from offline_rl.runs.event_writer import uninterrupted_writes
from offline_rl.runs.files import (
    RUN_BEST_POLICY_FILE,
    RUN_CHECKPOINT_FILE,
    RUN_DIVERGED_FILE,
    RUN_FINAL_POLICY_FILE,
    RUN_SETTINGS_FILE,
    RUN_SUMMARY_FILE,
    new_log_path,
)
from offline_rl.runs.video_preview import Preview
from offline_rl.runs.wandb_logger import WandbRun, mirror_scalars

log = logging.getLogger(__name__)


@dataclass
class RunFolder:
    """One run's folder and the trainer hooks that write into it (see the module docstring)."""

    algorithm: Any
    settings: RunConfig
    log_path: Path
    writer: Any  # torch.utils.tensorboard.SummaryWriter
    reporter: EvaluationReporter
    saved: dict[str, Any]
    on_best: Callable[[Any, Path], None] | None = None
    on_checkpoint: Callable[[Path], dict[str, Any]] | None = None
    started: float = field(default_factory=time.time)
    lock: FileLock | None = None
    """Held while the run writes here: the same checkpoint resumed twice at once is refused."""
    random_state: dict[str, Any] | None = None
    """The generators' states in the checkpoint resumed from, restored as training starts."""
    wandb: WandbRun | None = None
    """With --logger wandb: the W&B run that gets a copy of every scalar the writer gets."""
    counters: tuple[int, int, int] | None = None
    """(epoch, env step, update) of the checkpoint resumed from: where the trainer starts again."""
    into_epoch: int | None = None
    """The updates into its next epoch of the mid-epoch checkpoint resumed from (None: an epoch's)."""
    checkpoint_file: str = RUN_CHECKPOINT_FILE
    """Where the next checkpoint is written (a seed batch's round writes them aside, then renames them)."""
    says_stop: bool = True
    """Whether a stop's line (how far the run got, how to go on) is this folder's to say (one seed of a
    batch says it for all)."""

    @classmethod
    def open(
        cls,
        algorithm: Any,
        settings: RunConfig,
        reporter_factory: Callable[[Any], EvaluationReporter],
        *,
        task: str,
        algo_name: str,
        saved: dict[str, Any],
        checkpoint: dict[str, Any] | None = None,
        on_best: Callable[[Any, Path], None] | None = None,
        on_checkpoint: Callable[[Path], dict[str, Any]] | None = None,
    ) -> RunFolder:
        """The folder of a new run, or of the run `checkpoint` (read from `--resume-path`) came from."""
        from torch.utils.tensorboard import SummaryWriter  # heavy (TensorBoard): loaded only when used

        if settings.resume_path:
            log_path = Path(settings.resume_path).expanduser().resolve().parent
        else:
            log_path = new_log_path(settings.logdir, task, algo_name, settings.seed)
        lock = FileLock(log_path / LOCK_NAME)
        if not lock.acquire(wait=False):
            raise OfflineRLError(
                f"--resume-path {settings.resume_path}: another run is writing in {log_path} right now "
                "(the same checkpoint resumed twice?); wait for it to end"
            )
        wandb = None
        if settings.logging.logger == "wandb":
            wandb = cls._start_wandb(settings, log_path, lock, plain(saved))
        writer = SummaryWriter(str(log_path))
        writer = uninterrupted_writes(mirror_scalars(writer, wandb) if wandb is not None else writer)
        writer.add_text("config", str(saved.get("config")))
        reporter = reporter_factory(writer)
        counters, into_epoch = None, None
        if checkpoint is not None:
            counters = (int(checkpoint.get("epoch", 0)), int(checkpoint.get("env_step", 0)))
            counters += (int(checkpoint.get("gradient_step", 0)),)
            into_epoch = checkpoint.get(EPOCH_STEPS_DONE)
            reporter.best = best_evaluation_in(log_path)
            if into_epoch is not None:  # stopped after the epoch's evaluation
                reporter.first_index = counters[0]
                reporter.resume_mid_epoch()
            else:  # stopped before it, or during it: it is made again
                reporter.first_index, reporter.initial_counts = max(counters[0] - 1, 0), counters[0] > 0
        saved = plain(saved)
        write_json(log_path / RUN_SETTINGS_FILE, saved)  # what `offline_rl.results` groups runs by
        (log_path / RUN_DIVERGED_FILE).unlink(missing_ok=True)  # a diverged run resumed trains on
        random_state = checkpoint.get(RANDOM_STATE_KEY) if checkpoint is not None else None
        return cls(
            algorithm,
            settings,
            log_path,
            writer,
            reporter,
            saved,
            on_best,
            on_checkpoint,
            lock=lock,
            random_state=random_state,
            wandb=wandb,
            counters=counters,
            into_epoch=into_epoch,
        )

    def keeping_the_record(self, logger: Any) -> Any:
        """`logger` (a Tianshou logger) through which the trainer keeps this folder's record: its
        `save_mid_epoch` writes the checkpoint of a stop between updates
        (`offline_rl.algorithms.trainer`); resuming, its `restore_data`, where Tianshou's trainer
        reads the counters it resumes from, gives the checkpoint's (the TensorBoard events are
        written after the checkpoint, so a run stopped between the two would otherwise go back an
        epoch with newer weights), and its `epoch_steps_done` those of a mid-epoch checkpoint."""
        logger.save_mid_epoch = self.save_mid_epoch
        if self.counters is None:
            return logger
        logger.epoch_steps_done = self.into_epoch
        epoch, env_step, gradient_step = self.counters

        def restore_data() -> tuple[int, int, int]:
            logger.last_save_step = logger.last_log_test_step = epoch
            logger.last_log_update_step, logger.last_log_train_step = gradient_step, env_step
            return epoch, env_step, gradient_step

        logger.restore_data = restore_data
        return logger

    @staticmethod
    def _start_wandb(settings: RunConfig, log_path: Path, lock: FileLock, saved: dict[str, Any]) -> WandbRun:
        """The run's W&B run; if it cannot start, the folder is released, and a new run's removed."""
        try:
            return WandbRun.start(log_path, settings.logdir, settings.logging, saved)
        except OfflineRLError:
            lock.release()
            if not settings.resume_path:
                shutil.rmtree(log_path, ignore_errors=True)  # made by this run a moment ago, nothing in it
            raise

    @property
    def resuming(self) -> bool:
        return self.settings.resume_path is not None

    def trainer_params(self) -> dict[str, Any]:
        """The keyword arguments every Tianshou trainer gets from the run's settings and this folder."""
        return {
            "max_epochs": self.settings.epoch,
            "test_step_num_episodes": self.settings.test_num,
            "batch_size": self.settings.batch_size,
            "save_best_fn": self.save_best,
            "save_checkpoint_fn": self.save_last,
            "resume_from_log": self.resuming,
            "compute_score_fn": self.reporter,
            **progress_output(),
        }

    def save_best(self, algorithm: Any) -> None:
        """`policy.pth` when the evaluation just made is the best trained one so far. Tianshou's
        trainer calls this on its own idea of the best, which takes the first evaluation as the best
        whatever it scored; the reporter's record, which knows the resumed run's earlier best, decides."""
        if not self.reporter.latest_is_best:
            return
        best = plain(self.reporter.best)
        save_checkpoint(self.log_path / RUN_BEST_POLICY_FILE, algorithm, best_evaluation=best, **self.saved)
        if self.on_best is not None:
            with preserved_random_state():  # what it draws must not depend on which epochs were best
                self.on_best(algorithm, self.log_path)

    def save_last(self, epoch: int, env_step: int, gradient_step: int) -> str:
        """`checkpoint.pth` after each epoch's updates (Tianshou's trainer calls it before the epoch's
        evaluation, which a resumed run makes again first); `on_checkpoint(folder)` first writes
        what else the run keeps and returns the fields to add to the checkpoint. Weights holding a
        NaN stop the run before they are written, so `checkpoint.pth` keeps the last sound epoch."""
        return str(self._save_checkpoint(epoch, env_step, gradient_step))

    def save_mid_epoch(self, epoch: int, env_step: int, gradient_step: int, epoch_steps_done: int) -> None:
        """`checkpoint.pth` where a stop between two training steps found the run: `epoch` epochs done
        and evaluated, and `epoch_steps_done` steps of the next (updates offline, env steps online)."""
        self._save_checkpoint(epoch, env_step, gradient_step, **{EPOCH_STEPS_DONE: epoch_steps_done})

    def _save_checkpoint(self, epoch: int, env_step: int, gradient_step: int, **more: Any) -> Path:
        broken = non_finite_tensors(self.algorithm)
        if broken:
            which = f"{broken[0]} and {len(broken) - 1} more tensors" if len(broken) > 1 else broken[0]
            raise TrainingDiverged(f"training diverged: the weights hold NaN or inf after epoch {epoch} ({which})")
        random_state = capture_random_state()  # as the evaluation and updates that come next find it
        with preserved_random_state():
            extra = self.on_checkpoint(self.log_path) if self.on_checkpoint is not None else {}
        return save_checkpoint(
            self.log_path / self.checkpoint_file,
            self.algorithm,
            epoch=epoch,
            gradient_step=gradient_step,
            env_step=env_step,
            **{RANDOM_STATE_KEY: random_state},
            **more,
            **extra,
            **self.saved,
        )

    def add_video(self, tag: str, preview: Preview, step: int) -> None:
        """A filmed evaluation's preview (`--video-interval`) in TensorBoard's Images tab, which animates
        GIFs, under `tag` at `step` (the image summary `SummaryWriter.add_video` writes, without its
        moviepy), and in W&B's row of that step."""
        from tensorboard.compat.proto.summary_pb2 import Summary  # heavy (TensorBoard): loaded only when used

        size = {"height": preview.height, "width": preview.width, "colorspace": 3}
        summary = Summary(value=[Summary.Value(tag=tag, image=Summary.Image(encoded_image_string=preview.gif, **size))])
        # through the writer's event file, as `add_video` does; signals held, as for the writer's own calls
        interrupts_held_during(self.writer._get_file_writer().add_summary)(summary, step)
        if self.wandb is not None:
            self.wandb.add_video(tag, preview.gif, step)

    @contextlib.contextmanager
    def training(self, progress: Callable[[], str]) -> Iterator[None]:
        """Around the trainer: on Ctrl-C say how far the run got (`progress()`) and how to go on;
        close the logs in any case; write `policy_last.pth` when training ends. A resumed run's
        generators are put back here, after its data and networks are set up, so the evaluation of
        the resumed weights and the updates after it draw what the uninterrupted run drew."""
        if self.random_state is not None:
            restore_random_state(self.random_state)
        try:
            yield
        except KeyboardInterrupt as interrupt:
            last = self.log_path / RUN_CHECKPOINT_FILE
            hint = f"; continue with --resume-path {shell_quoted(last)}" if last.exists() else ""
            if self.says_stop:
                log.info(f"interrupted after {progress()}{hint}")
            self._finish_wandb(exit_status(interrupt))
            raise
        except TrainingDiverged as error:
            message = f"{error}; {self._before_divergence()}"
            # For `offline_rl.results`: the run is counted as diverged, not scored by its last evaluation.
            write_json(self.log_path / RUN_DIVERGED_FILE, {"message": message, "stopped_after": progress()})
            self._finish_wandb(EXIT_USER_ERROR, {"diverged": message})
            raise TrainingDiverged(message) from None
        except BaseException:
            self._finish_wandb(1)
            raise
        finally:
            self.writer.close()
            if self.lock is not None:
                self.lock.release()
        save_checkpoint(self.log_path / RUN_FINAL_POLICY_FILE, self.algorithm, **self.saved)

    def _before_divergence(self) -> str:
        """What is left of a diverged run and how to go on: resuming with the same settings would
        diverge again (a resume is exact), so the advice names settings to change."""
        change = "lower learning rates or smaller rewards (--reward-scale)"
        last = self.log_path / RUN_CHECKPOINT_FILE
        if not last.exists():
            return f"no checkpoint was written; start again with {change}"
        epoch = load_checkpoint(last).get("epoch", "?")
        return f"{last} holds epoch {epoch}, before it: resume from it with {change}, or start again"

    def finish(self, summary: dict[str, Any], headline: str, next_step: str = "") -> dict[str, Any]:
        """Complete `summary` (the evaluations, the folder), write it, and print `headline` followed
        by the last and the best evaluation, where the checkpoints and curves are, and `next_step`."""
        best = self.reporter.best
        last = self.reporter.history[-1] if self.reporter.history else None
        if last is None and self.resuming:
            # Nothing left to train: the run stopped after its last checkpoint, before that epoch's
            # evaluation and its summary. The evaluation of the resumed weights is of its final ones.
            last = self.reporter.initial
        summary = {**summary, "last": last, "best_optimistic": best, "best_epoch": self.reporter.best_epoch}
        summary["log_path"] = str(self.log_path)
        write_json(self.log_path / RUN_SUMMARY_FILE, plain(summary))  # the run is complete
        self._finish_wandb(0, plain(summary))
        best_text = self.reporter.format(best) if best else "n/a"
        last_text = self.reporter.format(last) if last else "n/a"
        log.info(
            f"{headline}; last evaluation {last_text} (policy_last.pth); best (optimistic) {best_text} "
            f"(policy.pth); checkpoints in {self.log_path}; "
            f"curves: tensorboard --logdir {shell_quoted(self.settings.logdir)}"
            + (f" and W&B {self.wandb.where()}" if self.wandb is not None else "")
            + (f"; {next_step}" if next_step else "")
        )
        return summary

    def _finish_wandb(self, exit_code: int, summary: dict[str, Any] | None = None) -> None:
        """End the W&B run once, with the command's exit status (a second stop while it uploads
        interrupts at once)."""
        if self.wandb is not None and not self.wandb.finished:
            interrupts_held_during(self.wandb.finish)(exit_code, summary)

    @property
    def evaluation_seconds(self) -> float:
        return min(self.reporter.seconds, time.time() - self.started)


def plain(value: Any) -> Any:
    """Checkpoints load with `weights_only=True`: keep only plain containers and scalars."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


LOCK_NAME = ".lock"
EPOCH_STEPS_DONE = "epoch_steps_done"
"""Checkpoint field of a mid-epoch checkpoint: the steps its next epoch had done (updates offline, env
steps online)."""


def progress_output() -> dict[str, bool]:
    """Tianshou trainer options for what a user watches: its progress bars only on a terminal (in a
    log file they are hundreds of lines of escape codes; the evaluation line then marks each
    epoch), and no second copy of each evaluation (the reporter prints it, with the normalised
    score)."""
    return {"show_progress": sys.stderr.isatty(), "verbose": False}


def best_evaluation_in(log_path: Path) -> dict[str, float] | None:
    """The best trained evaluation of the run in `log_path`, as its `policy.pth` records it.

    `policy.pth` is the one record of the best: `checkpoint.pth` is written before each epoch's
    evaluation, so it cannot know whether that evaluation was the best.
    """
    best_file = log_path / RUN_BEST_POLICY_FILE
    if not best_file.is_file():
        return None
    return load_checkpoint(best_file).get("best_evaluation")
