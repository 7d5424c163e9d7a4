"""Running an algorithm the way the examples do: evaluation envs, `--watch`, filmed evaluations, and
Tianshou's offline trainer with the statistics, update-rate notices and capture line of this project's
algorithms.

Shared by `examples/d4rl_cql.py`, `examples/atari_cql.py` and `examples/atari_qrdqn.py`, so they
behave alike. A run starts with `offline_rl.runs.session`; where it writes (its folder, checkpoints,
Ctrl-C and closing summary) is `offline_rl.runs.folder`.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tianshou.env import DummyVectorEnv, SubprocVectorEnv
from tianshou.trainer import OfflineTrainerParams

from offline_rl.core.errors import OfflineRLError
from offline_rl.core.resources import available_cores, require_memory
from offline_rl.runs.config import OfflineRunConfig, RunConfig
from offline_rl.runs.evaluation import EvaluationReporter, counted
from offline_rl.runs.evaluation_collector import EVALUATION_SEED_OFFSET, EvaluationCollector
from offline_rl.runs.folder import RunFolder
from offline_rl.runs.policy_export import export_run_policy
from offline_rl.runs.record import filmed, finish_offline_run, folder_logger
from offline_rl.runs.value_estimate import estimate_policy_value
from offline_rl.runs.video import EvaluationVideos, VideoFolder, prepare_offscreen_rendering
from offline_rl.runs.video_preview import animated_preview

if TYPE_CHECKING:
    from offline_rl.runs.video import Videos

log = logging.getLogger(__name__)

SUBPROCESS_ENVS_MIN_CORES = 4
"""Envs run in their own processes from this many available cores on: on fewer, the traffic between
processes costs more than stepping in parallel gains (`benchmarks/evaluation_envs.py` measures both;
the figures are on the documentation's benchmark page)."""


def envs_in_subprocesses(num: int, *, cores: int | None = None, rendering: bool = False) -> bool:
    """Whether `num` envs step in parallel processes (Tianshou's `SubprocVectorEnv`) rather than
    one after another in this one: only with several envs, enough cores, and no on-screen window."""
    cores = available_cores() if cores is None else cores
    return num > 1 and cores >= SUBPROCESS_ENVS_MIN_CORES and not rendering


ENV_BYTES = {False: 4 << 20, True: 96 << 20}
"""About what one evaluation env holds, stepping in this process (a MuJoCo model and its data) or in
a process of its own (a Python interpreter with numpy, gymnasium and MuJoCo, beside what it shares)."""


def require_training_memory(updates: dict[str, int], run: RunConfig, *, training_envs: int = 0) -> None:
    """Refuse, in one line before any network is built, a run whose updates (`updates`: bytes by the
    flag and value that set them, as an algorithm's config estimates them), evaluation envs and (online)
    `training_envs` need more memory than the process may take, naming the flag that asks for the most."""
    if not run.trains:
        return
    seeds = getattr(run, "num_seeds", 1)  # every seed has its own networks, batches and evaluation envs
    parts = {**updates, f"--test-num {run.test_num}": run.test_num * ENV_BYTES[envs_in_subprocesses(run.test_num)]}
    parts = {flag: size * seeds for flag, size in parts.items()}
    if training_envs:
        parts[f"--training-num {training_envs}"] = training_envs * ENV_BYTES[envs_in_subprocesses(training_envs)]
    largest = max(parts, key=lambda flag: parts[flag])
    others = [flag.split()[0] for flag in parts if flag != largest] + (["--num-seeds"] if seeds > 1 else [])
    named = f"{largest} (for each of --num-seeds {seeds})" if seeds > 1 else largest
    require_memory(sum(parts.values()), named, f"lower {largest.split()[0]} (or {', '.join(others)})")


def evaluation_collector(
    policy: Any, make_env: Callable[[], Any], run: RunConfig, *, rendering: bool = False, in_process: bool = False
) -> Any:
    """The evaluation collector of a run: --test-num envs from `make_env` (`vector_envs`), reseeded
    `--seed` + 10 000 + i before every evaluation (`EvaluationCollector`); the offset keeps their
    episodes apart from the training envs an online run seeds from `--seed`. Each evaluation plays
    --test-num episodes, or episodes for --test-steps steps, whole or cut there (--test-steps-cut)
    (not while rendering: a window to watch needs no budget, and the own loop that plays budgets
    draws nothing). Rendering envs, and `in_process` ones (filmed evaluations), step in this process."""

    seed = run.seed + EVALUATION_SEED_OFFSET
    envs = vector_envs(make_env, run.test_num, seed, rendering=rendering or in_process)
    budget = 0 if rendering else run.test_steps
    return EvaluationCollector(policy, envs, seed, min_steps=budget, cut_at_budget=bool(budget) and run.test_steps_cut)


def showing_collector(
    policy: Any, make_test_env: Callable[..., Any], run: RunConfig, *, task: str
) -> tuple[Any, Videos | None]:
    """The evaluation collector of a run (`evaluation_collector`), its episodes shown in a window
    (`--render`: `make_test_env(render_mode="human")`) or filmed (with `render_mode="rgb_array"`):
    every episode of `--watch` into `--save-video`'s folder, or a training run's chosen evaluations
    (`--video-interval`, `film_evaluations`); and the videos, if filmed. Envs shown in a window or
    filmed by `--watch` step in this process and play --test-num whole episodes. A filmed training run
    evaluates as it would unfilmed: its filmed evaluations on envs in this process, and its others
    on the envs an unfilmed run plays on (in processes of their own where the cores allow), each
    reseeded alike."""
    if run.render > 0:
        return evaluation_collector(policy, lambda: make_test_env(render_mode="human"), run, rendering=True), None
    if not (run.save_video or run.video_interval):
        return evaluation_collector(policy, make_test_env, run), None

    prepare_offscreen_rendering()
    if run.save_video:
        videos: Videos = VideoFolder(run.save_video, task, on_saved=say_saved_video, quality=run.video_quality)
    else:
        videos = EvaluationVideos(on_saved=say_saved_video, quality=run.video_quality)
    make = lambda: videos.wrap(make_test_env(render_mode="rgb_array"))  # noqa: E731
    if run.save_video or not envs_in_subprocesses(run.test_num):
        return evaluation_collector(policy, make, run, rendering=bool(run.save_video), in_process=True), videos
    collector = evaluation_collector(policy, make_test_env, run)
    collector.filming_envs = vector_envs(make, run.test_num, collector.seeds[0], rendering=True)
    return collector, videos


VIDEOS_FOLDER = "videos"
"""Where in its run folder a training run's evaluation videos go (`--video-interval`)."""
PREVIEW_TAG = "eval/video"
"""The TensorBoard image (and W&B video) of each filmed evaluation's preview, at the evaluation's step."""


def film_evaluations(test_collector: Any, videos: Videos | None, folder: RunFolder) -> None:
    """Choose, as each evaluation begins, whether its first episode is filmed: every
    `--video-interval`-th evaluation (the one before training is the 0th) and the last, each as
    `<run folder>/videos/evaluation-<k>.mp4`, numbered as the evaluation's line is. A resumed run's
    evaluation of the weights it resumes repeats the episode of the evaluation it re-scores, which
    is filmed only if that video is missing. Each video's preview, a small GIF, goes to the run's
    TensorBoard (and W&B) at the evaluation's step, where its curves are."""

    if not isinstance(videos, EvaluationVideos):
        return
    interval, last, reporter = folder.settings.video_interval, folder.settings.epoch, folder.reporter

    def choose() -> None:
        index = reporter.next_index
        path = folder.log_path / VIDEOS_FOLDER / f"evaluation-{index}.mp4"
        wanted = index % interval == 0 or index == last
        if wanted and reporter.next_is_initial and index > 0 and path.exists():
            wanted = False
        videos.film(path if wanted else None)
        test_collector.play_filmed(wanted)

    say_saved = videos.on_saved

    def saved(path: Path, steps: int, episode_return: float) -> None:
        if say_saved is not None:
            say_saved(path, steps, episode_return)
        try:
            preview = animated_preview(path)
        except OfflineRLError as error:  # the video is kept: a run is not stopped for its preview
            log.info(f"no preview of it in TensorBoard: {error}")
            return
        folder.add_video(PREVIEW_TAG, preview, reporter.step_of(reporter.next_index))

    test_collector.before_reset, videos.on_saved = choose, saved


@contextlib.contextmanager
def evaluation_envs_closed(test_collector: Any, videos: Videos | None) -> Iterator[None]:
    """Close a run's evaluation envs (a watch's or a training run's) and its filming bar when it ends,
    however it ends: a video its stop cut short then leaves no file behind."""
    try:
        yield
    finally:
        test_collector.close()
        if videos is not None:
            videos.close()


def say_saved_video(path: Path, steps: int, episode_return: float) -> None:
    log.info(f"video {path}: return {episode_return:.2f} in {steps} steps")  # above the evaluation's bar


def vector_envs(make: Callable[[], Any], num: int, seed: int, *, rendering: bool = False) -> Any:
    """`num` envs from `make`, seeded `seed, seed + 1, ...`: in subprocesses where that is faster
    (`envs_in_subprocesses`), else in Tianshou's `DummyVectorEnv`."""

    if envs_in_subprocesses(num, rendering=rendering):
        with warnings.catch_warnings():  # Python's note on fork() in a threaded process: the children run envs only
            warnings.filterwarnings("ignore", message=".*use of fork\\(\\) may lead to deadlocks.*")
            envs: Any = SubprocVectorEnv([make for _ in range(num)])
    else:
        envs = DummyVectorEnv([make for _ in range(num)])
    envs.seed([seed + i for i in range(num)])
    return envs


def watch(
    algorithm: Any,
    test_collector: Any,
    *,
    task: str,
    episodes: int,
    render: float,
    reporter: EvaluationReporter,
    source: str,
    videos: Videos | None = None,
) -> dict[str, Any]:
    """Evaluate only: `episodes` whole episodes, printed as one line (with `videos`, filmed there). The
    envs are closed at the end, so that a video of an episode a stop cut short leaves no file behind."""
    algorithm.eval()
    with evaluation_envs_closed(test_collector, videos):
        test_collector.reset()
        result = test_collector.collect(n_episode=episodes, render=render or None)
    record = reporter.describe(np.asarray(result.returns, dtype=np.float64))
    summary = {"mode": "watch", "task": task, "source": source, **record}
    played = counted(int(record["episodes"]), "episode")
    log.info(f"watch {task} from {source}: {reporter.format(record)} over {played}{filmed(summary, videos)}")
    return summary


def watch_policy(
    algorithm: Any, make_test_env: Callable[..., Any], run: RunConfig, reporter: EvaluationReporter, *, task: str
) -> dict[str, Any]:
    """`--watch` of an online program: `--test-num` episodes of the policy `--resume-path` restored
    (without it, of an untrained one, said so), shown or filmed as asked, printed as one line."""
    if run.resume_path is None:
        log.info("no --resume-path: playing with an untrained policy")
    test_collector, videos = showing_collector(algorithm.policy, make_test_env, run, task=task)
    source = str(run.resume_path or "an untrained policy")
    return watch(
        algorithm, test_collector, task=task, episodes=run.test_num, render=run.render, reporter=reporter,
        source=source, videos=videos,
    )  # fmt: skip


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
    videos: Videos | None = None,
) -> dict[str, Any]:
    """Run Tianshou's offline trainer with logging and checkpoints; return the summary.

    `checkpoint` is the one `--resume-path` named: its evaluation count and best evaluation carry
    on, so a resumed run neither renumbers its evaluations nor forgets (or overwrites) its best.
    `videos` (`--video-interval`) films the test collector's chosen evaluations into the run folder.
    """
    folder = RunFolder.open(
        algorithm,
        settings,
        reporter_factory,
        task=task,
        algo_name=algo_name,
        saved=saved,
        checkpoint=checkpoint,
        on_best=on_best,
    )
    algorithm.statistics_interval = settings.log_interval
    algorithm.capture = settings.torch.compile
    log.info(algorithm.update_path())
    logger = folder_logger(folder, settings, saved, next(algorithm.parameters()).device)
    folder.reporter.updates_done = lambda: int(algorithm.num_updates)  # curves are plotted against updates
    updates_before = int(algorithm.num_updates)
    film_evaluations(test_collector, videos, folder)
    with (
        folder.training(lambda: f"{int(algorithm.num_updates) - updates_before} updates"),
        evaluation_envs_closed(test_collector, videos),
    ):
        algorithm.run_training(
            OfflineTrainerParams(
                buffer=buffer,
                test_collector=test_collector,
                epoch_num_steps=settings.step_per_epoch,
                logger=logger,
                **folder.trainer_params(),
            )
        )
    return finish_offline_run(
        folder, task=task, dataset_name=dataset_name, updates_before=updates_before, algorithm=algorithm, videos=videos
    )


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
    """What every offline example ends with: `--export-policy`, `--fqe-updates` (no env), or evaluation
    envs, then `--watch` or offline training.

    `make_test_env(**kwargs)` builds one evaluation env (`render_mode` is passed for `--render` and
    `--save-video`);
    `training` holds `train_offline`'s keyword arguments (algo_name, saved, on_best, dataset_name).
    """
    if settings.export_policy:
        return export_run_policy(algorithm.policy, make_test_env, settings, task=task)
    if settings.estimates_value:
        return estimate_policy_value(algorithm, buffer, settings, device=str(algorithm.device))
    test_collector, videos = showing_collector(algorithm.policy, make_test_env, settings, task=task)
    if settings.watch:
        return watch(
            algorithm,
            test_collector,
            task=task,
            episodes=settings.test_num,
            render=settings.render,
            reporter=reporter_factory(None),
            source=str(settings.resume_path),
            videos=videos,
        )
    return train_offline(
        algorithm,
        buffer,
        test_collector,
        settings,
        reporter_factory,
        task=task,
        videos=videos,
        **training,
    )
