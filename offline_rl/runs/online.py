"""Online training of a behaviour policy, in a run folder like the offline programs': Tianshou's
off-policy trainer collecting into a replay that is written beside each checkpoint, so that
`--resume-path` goes on at the epoch and env step the run reached, with the replay it had.

The programs that train online (`examples/atari_qrdqn.py`, `examples/mujoco_sac.py`) say what is
their own in an `OnlinePlan`: the envs, the collection schedule, what their checkpoint keeps beside the
algorithm, and what happens as each env step is reached (QR-DQN's ε).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from offline_rl.core.progress import shell_quoted
from offline_rl.runs.config import RunConfig
from offline_rl.runs.evaluation import EvaluationReporter
from offline_rl.runs.files import RUN_BEST_POLICY_FILE
from offline_rl.runs.update_rate import pause_at_evaluations, update_rate_monitor

if TYPE_CHECKING:
    from offline_rl.runs.folder import RunFolder
    from offline_rl.runs.video import Videos

REPLAY_FILE = "replay.hdf5"
"""The replay buffer as it was at the newest checkpoint.pth, beside it in the run folder."""
REPLAY_SAMPLER = "replay_sampler"
"""The checkpoint's record of the replay's own generator of sampled indices (Tianshou 2 buffers keep one)."""
TRAINING_ENVS = "training_envs"
"""The checkpoint's record of where the training envs were in their episodes (envs that can say)."""


@dataclass
class OnlinePlan:
    """What an online program makes its own of `train_online`."""

    task: str
    algo_name: str  # the run folder's algorithm part: log/<task>/<algo_name>/<seed>/<stamp>
    label: str  # how the closing line names the learner ("QR-DQN")
    saved: dict[str, Any]  # the program's settings, kept in each checkpoint
    make_training_env: Callable[[], Any]
    make_test_env: Callable[..., Any]  # takes `render_mode` for --render and --video-interval
    replay: Any  # the buffer the training envs fill
    training_num: int
    step_per_epoch: int
    step_per_collect: int
    update_per_step: float
    checkpoint_replay: bool
    make_reporter: Callable[[Any], EvaluationReporter]  # from the run's TensorBoard writer
    next_step: str  # the closing line's advice, `{best}` standing for the best policy's path
    random_steps: int = 0  # env steps of uniform random actions before the policy acts
    keep: Callable[[], dict[str, Any]] = dict  # checkpoint fields beside the algorithm's
    restore: Callable[[dict[str, Any]], None] = lambda checkpoint: None  # what `keep` kept, on resume
    updates_done: Callable[[], int] | None = None  # the x-axis of the eval/* curves
    at_env_step: Callable[[int], None] = lambda env_step: None
    on_evaluation: Callable[[RunFolder, dict[str, float]], None] | None = None  # each trained evaluation's record
    windowed_statistics: bool = False  # the algorithm's statistics window (an offline algorithm fine-tuned online)
    summarize: Callable[[RunFolder], dict[str, Any]] = lambda folder: {}  # the summary's fields beside the counts


def train_online(plan: OnlinePlan, algorithm: Any, run: RunConfig, checkpoint: dict[str, Any] | None) -> dict[str, Any]:
    """Tianshou's off-policy trainer on `plan`'s envs and replay, in a run folder (`RunFolder`).

    `checkpoint` is the one `--resume-path` named: the run goes on in its folder at the epoch and env
    step it reached, with the replay saved beside it (`plan.checkpoint_replay`) and what `plan.keep`
    kept given back to `plan.restore`. Ctrl-C and SIGTERM stop between two steps, checkpointed."""
    import torch  # heavy (torch): loaded only when used
    from tianshou.data import Collector  # heavy (Tianshou): loaded only when used
    from tianshou.trainer import OffPolicyTrainerParams  # heavy (Tianshou): loaded only when used
    from tianshou.utils import TensorboardLogger  # heavy (TensorBoard, Tianshou): loaded only when used

    from offline_rl.algorithms.trainer import (  # heavy (Tianshou): loaded only when used
        StoppableOffPolicyTrainer,
        WindowedOffPolicyTrainer,
    )
    from offline_rl.core.compat import buffer_sampler_state, set_buffer_sampler_state  # heavy (Tianshou): likewise
    from offline_rl.data.online_replay import save_replay  # heavy (h5py, Tianshou): loaded only when used
    from offline_rl.runs.folder import RunFolder  # heavy (Tianshou, torch): loaded only when used
    from offline_rl.runs.record import log_every_window  # heavy (torch): loaded only when used
    from offline_rl.runs.training import (  # heavy (Tianshou, torch): loaded only when used
        evaluation_envs_closed,
        film_evaluations,
        showing_collector,
        vector_envs,
    )

    policy, replay = algorithm.policy, plan.replay
    collectors: list[Any] = []  # the training collector, once made

    def keep_with_checkpoint(log_path: Path) -> dict[str, Any]:
        if plan.checkpoint_replay:
            save_replay(replay, log_path / REPLAY_FILE)
        kept = plan.keep()
        if plan.checkpoint_replay:
            kept[REPLAY_SAMPLER] = buffer_sampler_state(replay)
            if collectors and (envs := training_envs_state(collectors[0])) is not None:
                kept[TRAINING_ENVS] = envs
        return kept

    folder = RunFolder.open(
        algorithm,
        run,
        plan.make_reporter,
        task=plan.task,
        algo_name=plan.algo_name,
        saved=plan.saved,
        checkpoint=checkpoint,
        on_checkpoint=keep_with_checkpoint,
    )
    envs_kept = (checkpoint or {}).get(TRAINING_ENVS)
    if checkpoint is not None and int(checkpoint.get("env_step", 0)) > 0:  # before the first env step: none
        print(resume_replay(replay, folder.log_path / REPLAY_FILE, episodes_go_on=envs_kept is not None))
        if REPLAY_SAMPLER in checkpoint:
            set_buffer_sampler_state(replay, checkpoint[REPLAY_SAMPLER])
        plan.restore(checkpoint)
    if plan.updates_done is not None:
        folder.reporter.updates_done = plan.updates_done
    train_collector = Collector(
        policy, vector_envs(plan.make_training_env, plan.training_num, run.seed), replay, exploration_noise=True
    )
    collectors.append(train_collector)
    in_place = envs_kept is not None and put_training_envs_back(train_collector, envs_kept)
    test_collector, videos = showing_collector(policy, plan.make_test_env, run, task=plan.task)
    film_evaluations(test_collector, videos, folder)
    if plan.on_evaluation is not None:
        folder.reporter.after_evaluation = lambda record: plan.on_evaluation(folder, record)
    first_env_step = int(checkpoint.get("env_step", 0)) if checkpoint else 0
    if checkpoint is None and plan.random_steps:  # as Tianshou's MuJoCo examples: uniform actions first
        train_collector.reset()
        train_collector.collect(n_step=plan.random_steps, random=True)
    env_steps = [first_env_step]  # the newest count the trainer reported (for Ctrl-C's line)
    device, total = str(next(algorithm.parameters()).device), run.epoch * plan.step_per_epoch
    monitor = update_rate_monitor(device, torch.get_num_threads(), "env step", total=total)

    def training_fn(epoch: int, env_step: int) -> None:
        env_steps[0] = env_step
        monitor.updated(env_step)  # log-file lines; slowdown notice
        plan.at_env_step(env_step)

    logger = folder.keeping_the_record(TensorboardLogger(folder.writer, save_interval=1))
    trainer = StoppableOffPolicyTrainer
    if plan.windowed_statistics:  # its statistics are read once per window: log each closed one
        logger, trainer = log_every_window(logger), WindowedOffPolicyTrainer
    with (
        folder.training(lambda: f"{env_steps[0] - first_env_step} env steps"),
        evaluation_envs_closed(test_collector, videos),
    ):
        result = trainer(
            algorithm,
            OffPolicyTrainerParams(
                training_collector=train_collector,
                test_collector=test_collector,
                epoch_num_steps=plan.step_per_epoch,
                collection_step_num_env_steps=plan.step_per_collect,
                update_step_num_gradient_steps_per_sample=plan.update_per_step,
                training_fn=training_fn,
                logger=pause_at_evaluations(logger, monitor),
                **folder.trainer_params(),
            ),
        ).run(reset_collectors=not in_place)
    return finish_online(plan, folder, steps=int(result.train_step), first_env_step=first_env_step, videos=videos)


def finish_online(
    plan: OnlinePlan, folder: RunFolder, *, steps: int, first_env_step: int, videos: Videos | None = None
) -> dict[str, Any]:
    """The run's summary (`steps`: collected by this invocation) and its closing lines."""
    from offline_rl.runs.record import filmed  # heavy (torch): loaded only when used

    elapsed = time.time() - folder.started
    summary = {
        "mode": "train",
        "task": plan.task,
        "env_steps": steps,
        "total_env_steps": first_env_step + steps,
        "seconds": elapsed,
        "env_steps_per_second": steps / max(elapsed, 1e-9),
        "evaluation_seconds": folder.evaluation_seconds,
        **plan.summarize(folder),
    }
    best_policy = shell_quoted(folder.log_path / RUN_BEST_POLICY_FILE)
    return folder.finish(
        summary,
        f"done: {plan.task} {plan.label}: {steps} env steps in {elapsed:.0f} s "
        f"({summary['env_steps_per_second']:.1f}/s, evaluation {folder.evaluation_seconds:.0f} s)"
        + filmed(summary, videos),
        plan.next_step.format(best=best_policy),
    )


def training_envs_state(collector: Any) -> dict[str, Any] | None:
    """Where each training env is in its episode (`offline_rl.envs.resumable`) and the observations the
    collector acts on next, as plain values for a checkpoint; None where the envs cannot say."""
    from offline_rl.core.compat import collector_pending_obs  # heavy (Tianshou): loaded only when used
    from offline_rl.envs.resumable import STATE_ATTRIBUTE

    obs = collector_pending_obs(collector)
    try:
        states = collector.env.get_env_attr(STATE_ATTRIBUTE)
    except AttributeError:
        return None
    return None if obs is None else {"states": list(states), "obs": obs.tolist()}


def put_training_envs_back(collector: Any, kept: dict[str, Any]) -> bool:
    """Reset the collector (its replay kept), then put each env back where `training_envs_state` found
    it; False (the envs left reset) where the checkpoint's envs are not these."""
    import numpy as np

    from offline_rl.core.compat import collector_pending_obs, resume_collector_at  # heavy (Tianshou): likewise
    from offline_rl.envs.resumable import RESTORE_ATTRIBUTE

    collector.reset(reset_buffer=False)
    fresh = collector_pending_obs(collector)
    if fresh is None or len(kept["states"]) != collector.env_num:
        return False
    for index, state in enumerate(kept["states"]):
        collector.env.set_env_attr(RESTORE_ATTRIBUTE, state, id=index)
    resume_collector_at(collector, np.asarray(kept["obs"], dtype=fresh.dtype))
    return True


def resume_replay(replay: Any, path: Path, *, episodes_go_on: bool = False) -> str:
    """Refill `replay` from `path` if it is there and fits (`episodes_go_on`: its running episodes uncut,
    the envs put back in them); one line saying what happened."""
    from offline_rl.data.online_replay import restore_replay  # heavy (h5py, Tianshou): loaded only when used

    if not path.is_file():
        return f"replay: the run saved none ({path} is absent); starting with an empty replay"
    reason = restore_replay(replay, path, cut_running=not episodes_go_on)
    if reason is not None:
        return f"replay: not restored ({reason}); starting with an empty replay"
    return f"replay: restored {len(replay)} transitions from {path}"
