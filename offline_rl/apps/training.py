"""Running an algorithm the way the examples do: device and seeds, resuming, logs, checkpoints,
evaluation, summary.

Shared by `examples/d4rl_cql.py`, `examples/atari_cql.py` and `examples/atari_qrdqn.py`, so they
behave alike:
- logs under `<logdir>/<task>/<algo>/<seed>/<timestamp>/` (TensorBoard, Tianshou's logger, training
  statistics as means over windows of `log_interval` updates);
- `policy.pth` at every new best evaluation, `checkpoint.pth` after every epoch and `policy_last.pth`
  when training ends, all full checkpoints (`offline_rl.checkpoint`), written atomically;
- the headline score is the last evaluation, as CORL, d3rlpy and the papers report; the best one
  is printed too, labelled "best (optimistic)": picking the maximum over evaluations uses the
  evaluation episodes for model selection, so it overstates what the method delivers;
- resuming from a checkpoint continues at the epoch it recorded (Tianshou's `resume_from_log`);
- one summary line at the end; Ctrl-C says how to resume.
"""

from __future__ import annotations

import datetime
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from offline_rl.apps.cli import pick_device
from offline_rl.apps.evaluation import EvaluationReporter
from offline_rl.apps.run_config import OfflineRunConfig, RunConfig, TorchConfig
from offline_rl.apps.update_rate import update_rate_monitor, watch_update_rate
from offline_rl.atomic import write_json
from offline_rl.checkpoint import load_checkpoint, restore_algorithm, save_checkpoint
from offline_rl.results.runs import RUN_SETTINGS_FILE, RUN_SUMMARY_FILE


@dataclass
class Session:
    """A started run: its settings, the device picked, and the checkpoint it resumes from, if any."""

    run: RunConfig
    device: str
    checkpoint: dict[str, Any] | None

    def restore(self, algorithm: torch.nn.Module, *, task: str | None = None) -> None:
        """Load the checkpoint's state (networks, optimisers, counters) into `algorithm`, if resuming;
        `task` names this run's task in the error when the networks do not fit."""
        if self.checkpoint is not None:
            restore_algorithm(algorithm, self.checkpoint, str(self.run.resume_path), task=task)


def start_session(run: RunConfig) -> Session:
    """Pick the device, set threads, precision and seeds, and read the checkpoint to resume from."""
    device = pick_device(run.torch.device)
    configure_torch(device, run.torch, run.seed)
    checkpoint = load_checkpoint(run.resume_path, device) if run.resume_path else None
    return Session(run=run, device=device, checkpoint=checkpoint)


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


SUBPROCESS_ENVS_MIN_CORES = 4
"""Envs run in their own processes from this many available cores on (`benchmarks/evaluation_envs.py`,
10 envs: on 2 cores subprocesses were slower, 0.28× HalfCheetah and 0.85× Pong; on 16 cores faster,
1.26× and 2.94×)."""


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, which containers and schedulers narrow)."""
    return len(os.sched_getaffinity(0))


def envs_in_subprocesses(num: int, *, cores: int | None = None, rendering: bool = False) -> bool:
    """Whether `num` envs step in parallel processes (Tianshou's `SubprocVectorEnv`) rather than
    one after another in this one: only with several envs, enough cores, and no on-screen window."""
    cores = available_cores() if cores is None else cores
    return num > 1 and cores >= SUBPROCESS_ENVS_MIN_CORES and not rendering


def vector_envs(make: Callable[[], Any], num: int, seed: int, *, rendering: bool = False) -> Any:
    """`num` envs from `make`, seeded `seed, seed + 1, ...`: in subprocesses where that is faster
    (`envs_in_subprocesses`), else in Tianshou's `DummyVectorEnv`."""
    import warnings

    from tianshou.env import DummyVectorEnv, SubprocVectorEnv

    if envs_in_subprocesses(num, rendering=rendering):
        with warnings.catch_warnings():  # Python's note on fork() in a threaded process: the children run envs only
            warnings.filterwarnings("ignore", message=".*use of fork\\(\\) may lead to deadlocks.*")
            envs: Any = SubprocVectorEnv([make for _ in range(num)])
    else:
        envs = DummyVectorEnv([make for _ in range(num)])
    envs.seed([seed + i for i in range(num)])
    return envs


def new_log_path(logdir: str, task: str, algo_name: str, seed: int) -> Path:
    """`<logdir>/<task>/<algo>/<seed>/<timestamp>`, as Tianshou's examples lay out their runs."""
    stamp = datetime.datetime.now().strftime("%y%m%d-%H%M%S")
    path = Path(logdir) / task.replace("/", "_") / algo_name / str(seed) / stamp
    path.mkdir(parents=True, exist_ok=True)
    return path


def watch(
    algorithm: Any,
    test_collector: Any,
    *,
    task: str,
    episodes: int,
    render: float,
    reporter: EvaluationReporter,
    source: str,
) -> dict[str, Any]:
    """Evaluate only: `episodes` whole episodes, printed as one line."""
    algorithm.eval()
    test_collector.reset()
    result = test_collector.collect(n_episode=episodes, render=render or None)
    record = reporter.describe(np.asarray(result.returns, dtype=np.float64))
    print(f"watch {task} from {source}: {reporter.format(record)} over {int(record['episodes'])} episodes")
    return {"mode": "watch", "task": task, "source": source, **record}


def train_offline(
    algorithm: Any,
    buffer: Any,
    test_collector: Any,
    settings: OfflineRunConfig,
    reporter_factory: Callable[[Any], EvaluationReporter],
    *,
    task: str,
    algo_name: str,
    saved: dict[str, Any],
    on_best: Callable[[Any, Path], None] | None = None,
    dataset_name: str | None = None,
    checkpoint: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run Tianshou's offline trainer with logging and checkpoints; return the summary.

    `checkpoint` is the one `--resume-path` named: its evaluation count and best evaluation carry
    on, so a resumed run neither renumbers its evaluations nor forgets (or overwrites) its best.
    """
    from tianshou.trainer import OfflineTrainerParams
    from tianshou.utils import TensorboardLogger
    from torch.utils.tensorboard import SummaryWriter

    resume_path = settings.resume_path
    if resume_path:
        log_path = Path(resume_path).expanduser().resolve().parent
    else:
        log_path = new_log_path(settings.logdir, task, algo_name, settings.seed)
    writer = SummaryWriter(str(log_path))
    writer.add_text("config", str(saved.get("config")))
    device = next(algorithm.parameters()).device
    monitor = update_rate_monitor(str(device), torch.get_num_threads())  # log-file lines; slowdown notice
    algorithm.statistics_interval = settings.log_interval
    algorithm.capture = settings.torch.compile
    print(algorithm.update_path())
    logger = watch_update_rate(log_every_window(TensorboardLogger(writer, save_interval=1)), monitor)
    reporter = reporter_factory(writer)
    reporter.updates_done = lambda: int(algorithm.num_updates)  # curves are plotted against updates
    if checkpoint is not None:
        reporter.first_index = int(checkpoint.get("epoch", 0))
        reporter.best = best_evaluation_in(log_path)
    saved = plain(saved)
    write_json(log_path / RUN_SETTINGS_FILE, saved)  # what `offline_rl.results` groups runs by

    def save_best(algo: Any) -> None:
        if reporter.current_is_initial:  # untrained or already-scored weights are never a new best
            return
        save_checkpoint(log_path / "policy.pth", algo, best_evaluation=plain(reporter.best), **saved)
        if on_best is not None:
            on_best(algo, log_path)

    def save_last(epoch: int, env_step: int, gradient_step: int) -> str:
        path = save_checkpoint(
            log_path / "checkpoint.pth",
            algorithm,
            epoch=epoch,
            gradient_step=gradient_step,
            env_step=env_step,
            **saved,
        )
        return str(path)

    start = time.time()
    updates_before = int(algorithm.num_updates)
    try:
        result = algorithm.run_training(
            OfflineTrainerParams(
                buffer=buffer,
                test_collector=test_collector,
                max_epochs=settings.epoch,
                epoch_num_steps=settings.step_per_epoch,
                test_step_num_episodes=settings.test_num,
                batch_size=settings.batch_size,
                save_best_fn=save_best,
                save_checkpoint_fn=save_last,
                resume_from_log=resume_path is not None,
                logger=logger,
                compute_score_fn=reporter,
                **progress_output(),
            )
        )
    except KeyboardInterrupt:
        last = log_path / "checkpoint.pth"
        hint = f"; continue with --resume-path {last}" if last.exists() else ""
        print(f"interrupted after {int(algorithm.num_updates) - updates_before} updates{hint}")
        raise
    finally:
        writer.close()
    save_checkpoint(log_path / "policy_last.pth", algorithm, **saved)
    elapsed = time.time() - start
    evaluating = min(reporter.seconds, elapsed)
    updates = int(algorithm.num_updates) - updates_before
    best = reporter.best
    last = reporter.history[-1] if reporter.history else None
    summary: dict[str, Any] = {
        "mode": "train",
        "task": task,
        "dataset": dataset_name,
        "updates": updates,
        "seconds": elapsed,
        "updates_per_second": updates / max(elapsed, 1e-9),
        "evaluation_seconds": evaluating,
        "training_updates_per_second": updates / max(elapsed - evaluating, 1e-9),
        "last": last,
        "best_optimistic": best,
        "best_epoch": getattr(result, "best_epoch", None),
        "log_path": str(log_path),
        "total_updates": int(algorithm.num_updates),
    }
    write_json(log_path / RUN_SUMMARY_FILE, plain(summary))  # the run is complete
    best_text = EvaluationReporter.format(best) if best else "n/a"
    last_text = EvaluationReporter.format(last) if last else "n/a"
    print(
        f"done: {task} on {dataset_name}: {updates} updates in {elapsed:.0f} s "
        f"({summary['updates_per_second']:.1f}/s, {device.type}; training {elapsed - evaluating:.0f} s at "
        f"{summary['training_updates_per_second']:.1f}/s, evaluation {evaluating:.0f} s); last evaluation {last_text} "
        f"(policy_last.pth); best (optimistic) {best_text} (policy.pth); checkpoints in {log_path}; "
        f"curves: tensorboard --logdir {settings.logdir}"
    )
    return summary


def log_every_window(logger: Any) -> Any:
    """`logger` writing all the training statistics it is handed. The algorithms' trainer
    (`offline_rl.trainer`) hands it each closed statistics window (every --log-interval updates,
    their mean); Tianshou's own schedule, which counts from another origin and would log a window's
    figures one update early, is switched off."""
    logger.update_interval = 1
    return logger


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
    best_file = log_path / "policy.pth"
    if not best_file.is_file():
        return None
    return load_checkpoint(best_file).get("best_evaluation")


def evaluate_or_train(
    algorithm: Any,
    buffer: Any,
    make_test_env: Callable[..., Any],
    settings: OfflineRunConfig,
    reporter_factory: Callable[[Any], EvaluationReporter],
    *,
    task: str,
    **training: Any,
) -> dict[str, Any]:
    """What every offline example ends with: evaluation envs, then `--watch` or offline training.

    `make_test_env(**kwargs)` builds one evaluation env (`render_mode` is passed when `--render`);
    `training` holds `train_offline`'s keyword arguments (algo_name, saved, on_best, dataset_name).
    """
    from tianshou.data import Collector

    render_kwargs = {"render_mode": "human"} if settings.render > 0 else {}
    envs = vector_envs(
        lambda: make_test_env(**render_kwargs), settings.test_num, settings.seed + 10_000, rendering=bool(render_kwargs)
    )
    test_collector = Collector(algorithm.policy, envs)
    if settings.watch:
        return watch(
            algorithm,
            test_collector,
            task=task,
            episodes=settings.test_num,
            render=settings.render,
            reporter=reporter_factory(None),
            source=str(settings.resume_path),
        )
    return train_offline(
        algorithm,
        buffer,
        test_collector,
        settings,
        reporter_factory,
        task=task,
        **training,
    )


def cpu_threads(requested: int) -> tuple[int, str]:
    """The CPU threads to train with, and why. `requested` > 0 is taken as given. Otherwise the
    cores other processes are not using right now: torch's threads spin while waiting for each
    other, so a thread that shares its core with another busy process stalls all of them (on a
    busy 2-core machine two threads ran many times slower than one)."""
    cores = available_cores()
    if requested > 0:
        return requested, "--threads"
    busy = min(cores, round(busy_cores(cores)))
    free = max(1, cores - busy)
    if free == cores:
        return cores, f"all {cores} cores are free; --threads to choose"
    return free, f"{busy} of {cores} cores are busy with other work; --threads to choose"


def busy_cores(cores: int, window_s: float = 0.3) -> float:
    """How many cores other processes keep busy now: /proc/stat sampled over `window_s` (this
    process sleeps meanwhile); elsewhere the 1-minute load average, which lags behind."""

    def sample() -> tuple[int, int] | None:
        try:
            with open("/proc/stat", encoding="ascii") as stat:
                fields = [int(value) for value in stat.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields), idle

    first = sample()
    if first is None:
        return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    time.sleep(window_s)
    second = sample()
    total, idle = second[0] - first[0], second[1] - first[1]  # type: ignore[index]
    return cores * (total - idle) / total if total > 0 else 0.0


def configure_torch(device: str, settings: TorchConfig, seed: int) -> None:
    """Threads, float32 matmul precision, CPU allocator and seeds, once per run."""
    import random

    from offline_rl.perf import tune_cpu_allocator

    if device == "cpu":
        threads, why = cpu_threads(settings.threads)
        torch.set_num_threads(threads)
        print(f"torch CPU threads: {threads} ({why})")
    elif settings.threads > 0:
        torch.set_num_threads(settings.threads)
    torch.set_float32_matmul_precision(settings.matmul_precision)
    if device == "cpu":
        tune_cpu_allocator()
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
