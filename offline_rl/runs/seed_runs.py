"""Several seeds of one offline run trained together (`--num-seeds S`): one batched update
(`offline_rl.algorithms.seeds.SeedBatch`), one run folder per seed.

Each seed's folder is the one a single run of that seed writes (`<logdir>/<task>/<algo>/<seed>/<time>/`
with its curves, `checkpoint.pth`, `policy.pth`, `policy_last.pth`, `behaviour_policy.pt` and
`summary.json`), so `offline_rl.results`, FQE, `--watch` and export read it unchanged. Seed i starts
from the weights a single run of seed i starts from: torch is seeded with it just before its networks
are built. Every checkpoint also lists the batch's seeds and folders (`seed_batch`): `--resume-path` of
any seed's checkpoint resumes the whole batch exactly (its saved `--num-seeds`), and with
`--num-seeds 1` that seed alone, as a single run. A seed whose training diverges is recorded as a
diverged single run is (`diverged.json`) and leaves the batch; the others train on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tianshou.trainer import OfflineTrainerParams
from tianshou.utils import LazyLogger

from offline_rl.algorithms.seeds import SeedBatch
from offline_rl.algorithms.trainer import SeedsTrainer, WindowedOfflineTrainer
from offline_rl.core import resources
from offline_rl.core.errors import OfflineRLError, TrainingDiverged
from offline_rl.runs.checkpoint import load_checkpoint, require_training_checkpoint, restore_algorithm
from offline_rl.runs.config import OfflineRunConfig
from offline_rl.runs.evaluation import EvaluationReporter
from offline_rl.runs.evaluation_collector import EVALUATION_SEED_OFFSET
from offline_rl.runs.files import RUN_CHECKPOINT_FILE, RUN_DIVERGED_FILE, RUN_NEXT_CHECKPOINT_FILE, SEED_BATCH_KEY
from offline_rl.runs.folder import EPOCH_STEPS_DONE, RunFolder, progress_output
from offline_rl.runs.joint_evaluation import JointEvaluation
from offline_rl.runs.record import finish_offline_run, folder_logger
from offline_rl.runs.training import vector_envs

log = logging.getLogger(__name__)


def seed_checkpoints(settings: OfflineRunConfig, checkpoint: dict[str, Any] | None, device: str) -> list[Any]:
    """Per seed, its settings (its seed, its own checkpoint to resume from) and that checkpoint: for a
    new batch, --seed + i and none; for --resume-path, the batch the named checkpoint belongs to."""
    if checkpoint is None or settings.resume_path is None:
        return [(replace(settings, seed=seed), None) for seed in settings.seeds]
    named = Path(settings.resume_path).expanduser().resolve()
    batch = checkpoint.get(SEED_BATCH_KEY)
    if not batch or len(batch.get("folders", ())) != settings.num_seeds:
        seeds = len(batch["folders"]) if batch else 1
        raise OfflineRLError(
            f"--resume-path {settings.resume_path}: a checkpoint of a run of {seeds} seed(s), not "
            f"--num-seeds {settings.num_seeds}; resume it with --num-seeds {seeds}"
        )
    members = []
    for seed, place in zip(batch["seeds"], batch["folders"], strict=True):
        folder = (named.parent / place).resolve()
        if (folder / RUN_DIVERGED_FILE).is_file():  # it left the batch: resumed alone it would diverge again
            log.info(f"seed {seed}: its training diverged ({folder / RUN_DIVERGED_FILE}); the others go on without it")
        else:
            members.append((int(seed), folder))
    if not members:
        raise OfflineRLError(f"--resume-path {settings.resume_path}: every seed of its batch diverged")
    folders = [folder for _, folder in members]
    settled = settle_checkpoint_round(folders, settings.resume_path, device, known={named: checkpoint})
    pairs = []
    for (seed, folder), own in zip(members, settled, strict=True):
        path = folder / RUN_CHECKPOINT_FILE
        require_training_checkpoint(own, str(path))
        pairs.append((replace(settings, seed=seed, resume_path=str(path)), own))
    return pairs


def joint_evaluation(
    policies: list[Any], make_test_env: Callable[..., Any], settings: OfflineRunConfig, seeds: list[int]
) -> Any:
    """The batch's evaluation: every seed's --test-num envs in one vector env (in processes of their own
    where the cores allow), each seed's reseeded as its single run's are."""
    envs = vector_envs(make_test_env, len(policies) * settings.test_num, seeds[0] + EVALUATION_SEED_OFFSET)
    min_steps, cut = settings.test_steps, bool(settings.test_steps) and settings.test_steps_cut
    return JointEvaluation(policies, envs, seeds, settings.test_num, min_steps=min_steps, cut_at_budget=cut)


def settle_checkpoint_round(
    folders: list[Path], resume_path: str, device: str, *, known: dict[Path, dict[str, Any]]
) -> list[dict[str, Any]]:
    """Put the batch's folders back at one point after a round of checkpoints a kill cut short, and
    return each folder's checkpoint (each file read once; `known`: those already read, by path): with
    every seed's new checkpoint written (some still aside), the round is completed; with some not, the
    ones written aside are dropped and every seed keeps its previous one."""

    def read(path: Path) -> dict[str, Any] | None:
        return known.get(path) or (load_checkpoint(path, device) if path.is_file() else None)

    current = [read(folder / RUN_CHECKPOINT_FILE) for folder in folders]
    written = [read(folder / RUN_NEXT_CHECKPOINT_FILE) for folder in folders]
    points = [_point(each) for each in current + written if each is not None]
    newest = max(points, default=None)
    complete = all(newest in (_point(now), _point(next_)) for now, next_ in zip(current, written, strict=True))
    settled = []
    for folder, now, next_ in zip(folders, current, written, strict=True):
        if next_ is not None and complete and _point(next_) == newest:
            os.replace(folder / RUN_NEXT_CHECKPOINT_FILE, folder / RUN_CHECKPOINT_FILE)
            now = next_
        else:
            (folder / RUN_NEXT_CHECKPOINT_FILE).unlink(missing_ok=True)
        settled.append(now)
    if any(each is None for each in settled) or len({_point(each) for each in settled}) > 1:
        raise OfflineRLError(
            f"--resume-path {resume_path}: the batch's seeds have no checkpoint of one point to go on from "
            "(stopped during its first checkpoints?); start the batch again, or resume a seed alone with --num-seeds 1"
        )
    return settled  # type: ignore[return-value]


def _point(checkpoint: dict[str, Any] | None) -> tuple[int, int, int] | None:
    """Where a checkpoint was written: (epoch, update, updates into the next epoch); None for none."""
    if checkpoint is None:
        return None
    into = int(checkpoint.get(EPOCH_STEPS_DONE) or 0)
    return int(checkpoint["epoch"]), int(checkpoint.get("gradient_step", 0)), into


@contextlib.contextmanager
def checkpoint_round(folders: list[RunFolder]) -> Iterator[None]:
    """Around one round of the seeds' checkpoints: each is written aside, and all are renamed into place
    once every one is written, so that a kill between two seeds' writes leaves a round that
    `settle_checkpoint_round` completes or drops whole."""
    writing = list(folders)
    for folder in writing:
        folder.checkpoint_file = RUN_NEXT_CHECKPOINT_FILE
    try:
        yield
    finally:
        for folder in writing:
            folder.checkpoint_file = RUN_CHECKPOINT_FILE
    for folder in writing:
        written = folder.log_path / RUN_NEXT_CHECKPOINT_FILE
        if written.is_file():  # a seed that diverged during the round wrote none
            os.replace(written, folder.log_path / RUN_CHECKPOINT_FILE)


def train_offline_seeds(
    build: Callable[[], Any],
    buffer: Any,
    make_test_env: Callable[..., Any],
    settings: OfflineRunConfig,
    reporter_factory: Callable[[Any, Any], EvaluationReporter],
    *,
    task: str,
    algo_name: str,
    saved_for: Callable[[OfflineRunConfig], dict[str, Any]],
    on_best: Callable[[Any, Path], None] | None = None,
    dataset_name: str | None = None,
    checkpoint: dict[str, Any] | None = None,
    device: str = "cpu",
) -> dict[str, Any]:
    """Train `settings.num_seeds` seeds of the algorithm `build()` makes as one batched update, each in
    its own run folder (see the module docstring); `reporter_factory(algorithm, writer)` is a seed's
    evaluation reporter, `saved_for(run)` what its checkpoints keep besides the networks. Returns the
    batch's summary: each seed's, and the mean and spread of their last evaluations."""
    pairs = seed_checkpoints(settings, checkpoint, device)
    algorithms = []
    for run, own in pairs:
        torch.manual_seed(run.seed)  # a single run of this seed builds its networks from the same draws
        algorithm = build()
        if own is not None:
            restore_algorithm(algorithm, own, str(run.resume_path), task=task)
        algorithms.append(algorithm)
    batch = SeedBatch(algorithms)
    stacked = batch.stacked
    stacked.statistics_interval = settings.log_interval
    stacked.capture = settings.torch.compile
    log.info(f"seeds {', '.join(str(run.seed) for run, _ in pairs)} in one batched update; {stacked.update_path()}")

    folders = [
        RunFolder.open(
            algorithm,
            run,
            lambda writer, algorithm=algorithm: reporter_factory(algorithm, writer),
            task=task,
            algo_name=algo_name,
            saved=saved_for(run),
            checkpoint=own,
            on_best=on_best,
        )
        for algorithm, (run, own) in zip(algorithms, pairs, strict=True)
    ]
    for index, folder in enumerate(folders):
        folder.reporter.label = f"seed {folder.settings.seed}: "
        folder.reporter.says_scale = folder.says_stop = index == 0  # the first seed's lines speak for all
        relative = [os.path.relpath(other.log_path, folder.log_path) for other in folders]
        folder.saved[SEED_BATCH_KEY] = {"seeds": [run.seed for run, _ in pairs], "folders": relative}
    updates_before = int(stacked.num_updates)
    with contextlib.ExitStack() as closing:
        policies = [algorithm.policy for algorithm in algorithms]
        evaluation = joint_evaluation(policies, make_test_env, settings, [run.seed for run, _ in pairs])
        closing.callback(evaluation.close)
        followers = []
        for index, (algorithm, folder, (run, _)) in enumerate(zip(algorithms, folders, pairs, strict=True)):
            folder.reporter.updates_done = lambda algorithm=algorithm: int(algorithm.num_updates)
            logger = folder_logger(folder, run, folder.saved, stacked.device, watch=index == 0)
            params = OfflineTrainerParams(
                buffer=buffer,
                test_collector=evaluation.seat(index),
                epoch_num_steps=settings.step_per_epoch,
                logger=logger,
                **folder.trainer_params(),
            )
            followers.append(WindowedOfflineTrainer(algorithm, params))
        finished = _train(batch, followers, folders, settings, buffer, updates_before, evaluation)
    summaries = [
        finish_offline_run(
            folder, task=task, dataset_name=dataset_name, updates_before=updates_before, algorithm=folder.algorithm
        )
        for folder in finished
    ]
    return batch_summary(summaries)


def _train(
    batch: SeedBatch,
    followers: list[WindowedOfflineTrainer],
    folders: list[RunFolder],
    settings: OfflineRunConfig,
    buffer: Any,
    updates_before: int,
    evaluation: JointEvaluation,
) -> list[RunFolder]:
    """Run the seeds' trainer inside every folder's `training` context; returns the folders of the seeds
    that trained to the end (a diverged seed's context ends with its divergence, recorded there)."""
    live = list(folders)
    done = lambda: f"{int(batch.stacked.num_updates) - updates_before} updates of {len(live)} seeds"  # noqa: E731
    contexts = {id(folder): folder.training(done) for folder in folders}
    for context in contexts.values():
        context.__enter__()

    def on_diverged(index: int, error: TrainingDiverged) -> None:
        folder = live.pop(index)
        evaluation.drop(folders.index(folder))
        try:
            contexts.pop(id(folder)).__exit__(TrainingDiverged, error, None)
        except TrainingDiverged as recorded:
            log.warning(f"seed {folder.settings.seed}: {recorded}; the other seeds train on")
        if folder.says_stop and live:  # the next seed's lines speak for the batch now
            live[0].says_stop = live[0].reporter.says_scale = True

    if batch.stacked.device.type == "cpu":
        resources.tune_cpu_allocator()
    batch.stacked.plan(settings.epoch * settings.step_per_epoch)
    driver = OfflineTrainerParams(
        buffer=buffer,
        epoch_num_steps=settings.step_per_epoch,
        max_epochs=settings.epoch,
        batch_size=settings.batch_size,
        resume_from_log=folders[0].resuming,
        logger=LazyLogger(),  # the trainer's own record is its followers' (`SeedsTrainer`)
        **progress_output(),
    )
    try:
        SeedsTrainer(batch.stacked, driver, followers, on_diverged, lambda: checkpoint_round(live)).run()
    except BaseException:
        error = sys.exc_info()
        for folder in live:  # each says where it stopped, and closes its logs
            with contextlib.suppress(BaseException):
                contexts[id(folder)].__exit__(*error)
        raise
    for folder in live:
        contexts[id(folder)].__exit__(None, None, None)  # writes policy_last.pth
    return live


def batch_summary(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """The batch's summary: every seed's, and the mean ± std of their last evaluations' scores."""
    lasts = [summary["last"] for summary in summaries if summary.get("last")]
    key = "normalized_score" if all("normalized_score" in last for last in lasts) else "return_mean"
    scores = [float(last[key]) for last in lasts]
    updates = max((int(each["total_updates"]) for each in summaries), default=0)  # the seeds train in step
    summary: dict[str, Any] = {"mode": "train", "seeds": summaries, "total_updates": updates}
    if scores:
        summary["last_mean"], summary["last_std"] = float(np.mean(scores)), float(np.std(scores))
        log.info(
            f"{len(summaries)} seeds: last evaluation {key.replace('_', ' ')} {summary['last_mean']:.2f} ± "
            f"{summary['last_std']:.2f} (mean ± std over the seeds; each seed's run folder holds its own)"
        )
    return summary
