"""What a training run records beside its folder's files: the logger that writes its curves (every
closed statistics window, the update rate watched), and its closing summary. Shared by a single run
(`offline_rl.runs.training`), a seed batch's runs (`offline_rl.runs.seed_runs`) and online runs."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch

from offline_rl.core.resources import RunRegistry
from offline_rl.runs.config import OfflineRunConfig
from offline_rl.runs.evaluation import counted
from offline_rl.runs.folder import RunFolder
from offline_rl.runs.update_rate import (
    UPDATE_RATES_FILE,
    MachineRates,
    compared_with_the_machine,
    update_rate_monitor,
    watch_update_rate,
)

if TYPE_CHECKING:
    from offline_rl.runs.video import Videos


def folder_logger(
    folder: RunFolder, settings: OfflineRunConfig, saved: dict[str, Any], device: Any, *, watch: bool = True
) -> Any:
    """The Tianshou logger writing `folder`'s record, logging every statistics window; with `watch`, the
    update rate watched (progress lines, the slowdown notice) against this machine's earlier runs alike
    (one seed of a batch watches for all)."""
    from tianshou.utils import TensorboardLogger  # heavy (TensorBoard): loaded only when used

    logger = log_every_window(folder.keeping_the_record(TensorboardLogger(folder.writer, save_interval=1)))
    if not watch:
        return logger

    total = settings.epoch * settings.step_per_epoch
    monitor = update_rate_monitor(str(device), torch.get_num_threads(), total=total)  # log lines; slowdown notice
    config = saved.get("config") or {}  # what sets the pace: the algorithm and its shapes, the batch, the machine
    pace = {"algorithm": config.get("algorithm"), "task": config.get("task"), "batch_size": settings.batch_size}
    pace |= {"device": str(device), "threads": torch.get_num_threads()}
    pace |= {"seeds": settings.num_seeds} if settings.num_seeds > 1 else {}
    rates = MachineRates(RunRegistry.default().folder / UPDATE_RATES_FILE, pace)
    return watch_update_rate(logger, compared_with_the_machine(monitor, rates))


def finish_offline_run(
    folder: RunFolder,
    *,
    task: str,
    dataset_name: str | None,
    updates_before: int,
    algorithm: Any,
    videos: Videos | None = None,
) -> dict[str, Any]:
    """`folder`'s summary (`RunFolder.finish`) of a run that trained `algorithm` from `updates_before`."""
    device = next(algorithm.parameters()).device
    elapsed = time.time() - folder.started
    evaluating = folder.evaluation_seconds
    updates = int(algorithm.num_updates) - updates_before
    rate, training_rate = updates / max(elapsed, 1e-9), updates / max(elapsed - evaluating, 1e-9)
    summary: dict[str, Any] = {
        "mode": "train",
        "task": task,
        "dataset": dataset_name,
        "updates": updates,
        "seconds": elapsed,
        "updates_per_second": rate,
        "evaluation_seconds": evaluating,
        "training_updates_per_second": training_rate,
        "total_updates": int(algorithm.num_updates),
    }
    # A resumed run counts this session's updates (the rates are of them) and says the run's total.
    counted = f"{updates} updates" + (f" ({int(algorithm.num_updates)} in all)" if updates_before else "")
    return folder.finish(
        summary,
        f"done: {task} on {dataset_name}: {counted} in {elapsed:.0f} s ({rate:.1f}/s, {device.type}; "
        f"training {elapsed - evaluating:.0f} s at {training_rate:.1f}/s, evaluation {evaluating:.0f} s)"
        + filmed(summary, videos),
    )


def log_every_window(logger: Any) -> Any:
    """`logger` writing all the training statistics it is handed. The algorithms' trainer
    (`offline_rl.algorithms.trainer`) hands it each closed statistics window (every --log-interval updates,
    their mean); Tianshou's own schedule, which counts from another origin and would log a window's
    figures one update early, is switched off."""
    logger.update_interval = 1
    return logger


def filmed(summary: dict[str, Any], videos: Videos | None) -> str:
    """The videos a run wrote (a watch's or a training run's), added to its `summary`, and what its
    closing line says of them."""
    if videos is None:
        return ""
    summary["videos"] = [str(path) for path in videos.saved]
    return f"; {counted(len(videos.saved), 'video')}" + (f" in {videos.saved[0].parent}" if videos.saved else "")
