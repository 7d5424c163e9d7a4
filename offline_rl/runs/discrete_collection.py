"""Play a discrete-action policy into an offline dataset (`atari_qrdqn.py --watch --save-buffer-name`).

Each env's transitions go to a recorder of their own, so episodes stay whole, and the recorders are
joined env after env at the end: a `FrameStackBuffer` (each frame once) for an Atari game, a plain
`ReplayBuffer` for a vector task. What is collected is kept on disk as it goes
(`offline_rl.runs.collection_journal`): an interrupted collection continues when the same command
runs again, instead of starting over.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from offline_rl.core.files import check_output
from offline_rl.core.interrupts import interrupts_between_steps
from offline_rl.core.progress import progress_bar
from offline_rl.envs.atari import is_atari_game, make_discrete_env
from offline_rl.runs.collection_journal import CollectionJournal, journal_directory

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CollectionPlan:
    """What to play and where to write it."""

    task: str
    frames_stack: int
    size: int
    num_envs: int
    seed: int
    output: Path
    checkpoint_every: int
    """Transitions between parts kept on disk; 0 keeps nothing, so an interruption loses the run."""
    settings: dict[str, Any]
    """The flags that shape the data, which a continuation must repeat."""
    overwrite: bool = False
    """Replace an existing `output`; otherwise it is refused before anything is played."""


def collect_buffer(plan: CollectionPlan, policy: Any) -> dict[str, Any]:
    """Play `plan.size` steps with `policy` (its ε already set), write the buffer, and return a
    summary (transitions, finished episodes, their mean return, bytes per transition in RAM)."""
    check_output(plan.output, flag="--save-buffer-name", overwrite=plan.overwrite)
    num_envs = min(plan.num_envs, plan.size)
    recorders = _recorders(plan, num_envs)
    journal = None
    if plan.checkpoint_every:
        journal = CollectionJournal.open(
            journal_directory(plan.output), plan.settings, recorders, every=plan.checkpoint_every
        )
    try:
        buffer, returns = _collect_and_write(plan, policy, recorders, journal)
    finally:
        if journal:
            journal.release()  # the parts stay for the next run of the command
    summary = {
        "transitions": len(buffer),
        "episodes": len(returns),
        "return_mean": float(np.mean(returns)) if returns else float("nan"),
        "bytes_per_transition": held_bytes(buffer) / len(buffer),
    }
    finished = (
        f"{summary['episodes']} finished episodes, mean return {summary['return_mean']:.2f}"
        if returns
        else "no episode finished"
    )
    log.info(
        f"wrote {plan.output}: {summary['transitions']} transitions, {finished}, "
        f"{summary['bytes_per_transition']:.0f} bytes/transition in RAM"
    )
    return summary


def _collect_and_write(
    plan: CollectionPlan, policy: Any, recorders: list[Any], journal: CollectionJournal | None
) -> tuple[Any, list[float]]:
    """Continue or start the collection, write the buffer, drop the parts; (buffer, returns)."""
    from offline_rl.data import save_buffer  # heavy (Tianshou, torch): loaded only when used

    returns = journal.returns if journal else []
    session = journal.session if journal else 0
    if journal and session:
        log.info(
            f"continuing the collection kept in {journal.directory}: {journal.transitions} of {plan.size} "
            f"transitions were collected; each env starts a new episode"
        )
        # Fresh ε draws and fresh games: a continuation repeating the first session's would correlate.
        np.random.seed(np.random.SeedSequence([plan.seed, session]).generate_state(1)[0])
    num_envs = len(recorders)
    envs = [make_discrete_env(plan.task, plan.frames_stack) for _ in range(num_envs)]
    try:
        _play(plan, policy, envs, recorders, journal, returns, first_seed=plan.seed + session * num_envs)
    finally:
        for env in envs:
            env.close()
    buffer = _join(plan, recorders)
    try:
        save_buffer(buffer, plan.output, compression="gzip")
    except KeyboardInterrupt:
        if journal:
            log.info(f"interrupted while writing {plan.output}; the same command writes it from {journal.directory}")
        raise
    if journal:
        journal.remove()
    return buffer, returns


def _recorders(plan: CollectionPlan, num_envs: int) -> list[Any]:
    from offline_rl.data.frame_stack import FrameStackBufferBuilder  # heavy (Tianshou, torch): loaded only when used
    from offline_rl.data.transitions import TransitionRecorder  # heavy (Tianshou, torch): loaded only when used

    if is_atari_game(plan.task):
        per_env = plan.size // num_envs + 2048
        return [FrameStackBufferBuilder(stack_num=plan.frames_stack, max_frames=per_env) for _ in range(num_envs)]
    return [TransitionRecorder() for _ in range(num_envs)]


def _play(
    plan: CollectionPlan,
    policy: Any,
    envs: list[Any],
    recorders: list[Any],
    journal: CollectionJournal | None,
    returns: list[float],
    first_seed: int,
) -> None:
    """Step the envs until the recorders hold `plan.size` transitions, keeping a part every
    `checkpoint_every`, and one more on Ctrl-C before it stops the command."""
    import torch  # heavy (torch): loaded only when used
    from tianshou.data import Batch  # heavy (Tianshou): loaded only when used

    collected = sum(len(recorder) for recorder in recorders)
    obs = np.stack([env.reset(seed=first_seed + i)[0] for i, env in enumerate(envs)])
    running = np.zeros(len(envs))
    policy.eval()
    bar = progress_bar(total=plan.size, initial=collected, unit="step", desc=f"collect {plan.task}")
    with bar, interrupts_between_steps() as stop_if_interrupted:
        try:
            while bar.n < plan.size:
                with torch.no_grad():
                    result = policy(Batch(obs=obs, info=Batch()))
                actions = policy.add_exploration_noise(np.asarray(result.act), Batch(obs=obs))
                for i, env in enumerate(envs):
                    stop_if_interrupted()
                    if bar.n >= plan.size:
                        break
                    next_obs, reward, terminated, truncated, _ = env.step(int(actions[i]))
                    recorders[i].add(obs[i], int(actions[i]), float(reward), terminated, truncated, next_obs)
                    running[i] += reward
                    if terminated or truncated:
                        returns.append(float(running[i]))
                        running[i] = 0.0
                        next_obs, _ = env.reset()
                    obs[i] = next_obs
                    bar.update(1)
                if journal:
                    journal.keep_if_due(recorders, returns)
            if journal:
                journal.keep(recorders, returns)  # all of it: an interrupted write of the file loses nothing
        except KeyboardInterrupt:
            if journal:
                journal.keep(recorders, returns)
                log.info(
                    f"interrupted after {bar.n} of {plan.size} transitions, kept in {journal.directory}; "
                    "run the same command again to continue"
                )
            raise


def _join(plan: CollectionPlan, recorders: list[Any]) -> Any:
    from offline_rl.data.frame_stack import merge_frame_stack_buffers  # heavy (Tianshou, torch): loaded only when used
    from offline_rl.data.transitions import (  # heavy (Tianshou, torch): loaded only when used
        join_recordings,
        set_dataset_info,
    )

    info = {"name": plan.output.name, "task": plan.task}  # the task: what atari_cql.py evaluates it on
    if is_atari_game(plan.task):
        frames = sum(recorder.position()[1] for recorder in recorders)
        buffer = merge_frame_stack_buffers(_emptied(recorders), total_frames=frames)
        set_dataset_info(buffer, info)
        return buffer
    return join_recordings(recorders, info=info)


def _emptied(recorders: list[Any]) -> Iterator[Any]:
    """Each recorder's buffer, taken out of `recorders` as it goes, so that its frames are freed
    once merged: collecting 1M Atari steps then peaks at 7 GB plus one env's share, not 14 GB."""
    while recorders:
        if len(recorders[0]):
            yield recorders.pop(0).build()  # no name holds the recorder while the merge copies it
        else:
            recorders.pop(0)


def held_bytes(buffer: Any) -> int:
    """RAM held by a buffer's transitions (a FrameStackBuffer counts each frame once)."""
    if hasattr(buffer, "frames"):
        return int(buffer.nbytes)
    keys = ("obs", "act", "rew", "terminated", "truncated", "done", "obs_next")
    return int(sum(np.asarray(getattr(buffer, key)).nbytes for key in keys))
