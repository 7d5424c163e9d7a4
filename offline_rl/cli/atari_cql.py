"""What `examples/atari_cql.py` is made of: its settings, and the steps around discrete CQL (a
QR-DQN head) trained offline on an Atari buffer and evaluated on whole games with unclipped rewards.
Discrete-action vector tasks (CartPole-v1) run through the same steps on an MLP head, with their
observations and rewards as they are.

Flags mirror Tianshou's classic `atari_cql.py` (kebab-case, snake_case accepted); logging,
checkpoints, `--resume-path`, `--watch` and the summary line behave as in `examples/d4rl_cql.py`.
"""

from __future__ import annotations

import glob
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import EnvSpec

from offline_rl.algorithms.discrete_cql.config import DiscreteCQLConfig
from offline_rl.cli.flags import parse_config
from offline_rl.cli.programs import training_command
from offline_rl.cli.task_choice import default_task_misfit, evaluation_task, warn_atari_only_settings
from offline_rl.core.errors import DatasetError, OfflineRLError
from offline_rl.core.progress import shell_quoted
from offline_rl.core.settings import setting
from offline_rl.data.fit import TaskMismatchWarning, dataset_env, same_task, warn_if_recorded_elsewhere
from offline_rl.data.frame_padding import frame_padding_of
from offline_rl.data.names import combined_label
from offline_rl.envs.atari import EVAL_PROTOCOLS, atari_game, is_atari_game, make_discrete_env
from offline_rl.envs.make import episode_limit, recorded_evaluation_spec, say_recorded_settings
from offline_rl.runs.config import OfflineRunConfig

PROG = "examples/atari_cql.py"
DEFAULT_TASK = "PongNoFrameskip-v4"  # Tianshou's classic Atari example's; used when the buffer names no env
DESCRIPTION = "Discrete CQL (QR-DQN head) trained offline on an Atari buffer."


@dataclass
class AtariCQLConfig:
    """The game, the buffer(s) to learn from, the run, and the algorithm."""

    FLAG_GROUP: ClassVar[str] = "data"

    task: str | None = setting(
        None,
        "Atari id (PongNoFrameskip-v4, ALE/Breakout-v5, ...) or a discrete-action task (CartPole-v1); "
        f"none: the data's env, else {DEFAULT_TASK}",
        details=(
            "The env the data records: an atari_qrdqn.py collection's task, an RL Unplugged shard's "
            "game, a Minari dataset's or an offline_rl.collect file's env."
        ),
    )
    frames_stack: int = setting(4, "frames per observation (Atari games; vector tasks are not stacked)", minimum=1)
    load_buffer_name: tuple[str, ...] = setting(
        ("expert.hdf5",),
        (
            "the offline data: buffer files (.hdf5; several shards or checkpoints combine), a D4RL-"
            "format file or a Minari dataset"
        ),
        details=(
            "Several RL Unplugged shards or DQN Replay checkpoints (converted), or atari_qrdqn.py "
            "collections, are combined into one buffer; a D4RL-format file or Minari dataset (id or "
            "directory) needs discrete actions. A glob pattern (ckpt_*.hdf5) stands for its files, as"
            " in sweep and preset files."
        ),
    )
    buffer_from_rl_unplugged: bool = setting(False, "the buffer was made by converters/rl_unplugged_atari.py")
    eval_env: str = setting(
        "sticky",
        "evaluation protocol: sticky (DQN Replay and the CQL paper) or NoFrameskip (Tianshou's classic)",
        details=(
            "sticky: ALE v5 settings, sticky actions p = 0.25, no no-ops, 108k frames per game. "
            "NoFrameskip: <Game>NoFrameskip-v4 with up to 30 no-ops."
        ),
        choices=EVAL_PROTOCOLS,
    )
    run: OfflineRunConfig = field(
        default_factory=lambda: OfflineRunConfig(epoch=100, step_per_epoch=10_000, batch_size=32)
    )
    # Atari games get the published protocol by default: rewards clipped to [-1, 1] in the learner.
    algorithm: DiscreteCQLConfig = field(default_factory=DiscreteCQLConfig)

    def buffers_label(self) -> str:
        """`--load-buffer-name` in the lines that name the data: `ckpt_{0-50}.hdf5` for a run's 51 files."""
        return combined_label(self.load_buffer_name, joiner=" ")


def config_from_args(argv: Sequence[str] | None) -> AtariCQLConfig:
    """The example's settings from its command line (and `--config` preset file)."""
    return parse_config(AtariCQLConfig(), argv, prog=PROG, description=DESCRIPTION)


def create_buffer_command(task: str, path: str, from_rl_unplugged: bool = False) -> str:
    if not is_atari_game(task):
        recipe = f"python examples/atari_qrdqn.py --config configs/qrdqn/CartPole-v1.yaml --task {task}"
        watch = f"--watch --resume-path <the policy.pth it printed> --save-buffer-name {shell_quoted(path)}"
        return f"{recipe}, then {recipe} {watch}"
    if from_rl_unplugged:
        return f"python converters/rl_unplugged_atari.py --task {atari_game(task)} --run-id 1 --shard-id 0"
    return (
        f"python examples/atari_qrdqn.py --task {task} --watch --eps-test 0.2 --buffer-size 1000000 "
        f"--save-buffer-name {shell_quoted(path)}"
    )


SINGLE_SOURCE_FORMATS = {"d4rl": "D4RL-format file", "minari": "Minari dataset", "d3rlpy": "d3rlpy dataset file"}
"""Formats read by `load_dataset` as one buffer each; only Tianshou frame buffers are combined."""


def buffer_files(names: Sequence[str]) -> tuple[str, ...]:
    """`--load-buffer-name` with its glob patterns expanded as a shell would (sorted), for the sweep files
    and presets no shell reads: `~/.dqn_replay/buffers/Pong/1/ckpt_*-first_0.01.hdf5` names a DQN Replay
    run's 51 converted files. A name that exists or holds no pattern stays as given (a Minari id, a file
    whose name has brackets); a pattern that matches nothing is a one-line error."""
    files: list[str] = []
    for name in names:
        path = Path(name).expanduser()
        if path.exists() or not any(character in name for character in "*?["):
            files.append(name)
            continue
        matches = sorted(glob.glob(str(path)))
        if not matches:
            raise OfflineRLError(f"--load-buffer-name {name}: no file matches this pattern")
        files += matches
    return tuple(files)


def load_atari_buffer(config: AtariCQLConfig) -> Any:
    """The offline data named by --load-buffer-name: Tianshou buffers (several frame buffers are
    combined), or one D4RL-format file or Minari dataset of a discrete task, read by the loaders
    `d4rl_cql.py` uses; a one-line error with the fix if missing or not discrete."""
    from offline_rl.data import load_buffers, load_dataset  # heavy (h5py, Tianshou, torch): loaded only when used
    from offline_rl.data.frame_pool import FramePoolBuffer  # heavy (h5py, Tianshou, torch): loaded only when used
    from offline_rl.data.minari_atari import (  # heavy (h5py, Tianshou, torch): loaded only when used
        load_minari_atari,
        minari_records_screens,
    )
    from offline_rl.data.transitions import has_discrete_actions  # heavy (Tianshou, torch): loaded only when used

    names = config.load_buffer_name
    kinds = [_source_format(name) for name in names]
    if kinds == ["minari"] and minari_records_screens(names[0]):  # Minari's atari/* datasets: RGB screens
        buffer = load_minari_atari(names[0], stack_num=config.frames_stack, download=True)
    elif len(kinds) == 1 and kinds[0] in SINGLE_SOURCE_FORMATS:
        limit = episode_limit(config.task) if config.task else None  # for a file without time-outs
        buffer = load_dataset(names[0], download=True, max_episode_steps=limit)
    else:
        for name, kind in zip(names, kinds, strict=True):
            if kind in SINGLE_SOURCE_FORMATS:
                raise OfflineRLError(
                    f"--load-buffer-name {name}: a {SINGLE_SOURCE_FORMATS[kind]} is trained on alone; several "
                    "sources combine only when all are Tianshou frame buffers (RL Unplugged or DQN Replay "
                    "conversions, or atari_qrdqn.py collections)"
                )
            if kind is None:
                how = create_buffer_command(config.task or DEFAULT_TASK, names[0], config.buffer_from_rl_unplugged)
                raise OfflineRLError(f"--load-buffer-name {name}: no such file; create one with: {how}")
        buffer = load_buffers([Path(name).expanduser() for name in names])
    if not has_discrete_actions(buffer):
        raise OfflineRLError(
            f"--load-buffer-name {config.buffers_label()}: its actions are continuous (floats, shape "
            f"{tuple(np.asarray(buffer.act[:1]).shape[1:])}); discrete CQL takes integer action indices (in a "
            f"D4RL-format file, an integer 'actions' column). Train on it with CQL-SAC: "
            f"{training_command(names, discrete=False)}"
        )
    if config.buffer_from_rl_unplugged and not isinstance(buffer, FramePoolBuffer):
        raise OfflineRLError(
            f"--buffer-from-rl-unplugged: {config.buffers_label()} is not a buffer written by the RL Unplugged "
            "converter"
        )
    return buffer


def _source_format(name: str) -> str | None:
    """`detect_format`'s answer for one --load-buffer-name (`d4rl`, `minari`, `tianshou`, `d3rlpy`), or None for
    a file that is not there and names no dataset; a one-line error for a file it cannot read."""
    from offline_rl.data.detect import detect_format  # heavy (h5py, Tianshou, torch): loaded only when used

    try:
        return detect_format(name)
    except DatasetError:
        if Path(name).expanduser().exists():
            raise
        return None


def check_buffer_fits(config: AtariCQLConfig, task: str, buffer: Any, env: gym.Env, *, task_given: bool) -> None:
    """A one-line error when the buffer's observations or actions do not fit the task, with the fix:
    the task the buffer records when it records another; --task when it records none and none was
    given; else the command that makes a fitting one."""
    from offline_rl.data import dataset_info  # heavy (Tianshou, torch): loaded only when used

    where = config.buffers_label()
    belongs_to = dataset_env(dataset_info(buffer))
    if belongs_to is not None and not same_task(belongs_to.task, task):
        fix = f"it {belongs_to.origin}: give --task {belongs_to.task}"
    elif belongs_to is None and not task_given:
        fix = default_task_misfit(where, task)
    else:
        how = create_buffer_command(task, config.load_buffer_name[0], config.buffer_from_rl_unplugged)
        fix = f"create a matching one with: {how}"
    obs_shape = tuple(np.asarray(buffer[np.array([0])].obs).shape[1:])
    expected = tuple(env.observation_space.shape or ())
    if obs_shape != expected:
        raise OfflineRLError(
            f"--load-buffer-name {where}: observations have shape {obs_shape}, but {task} with "
            f"--frames-stack {config.frames_stack} observes {expected}; {fix}"
        )
    num_actions = int(env.action_space.n)  # type: ignore[attr-defined]
    top = int(np.max(buffer.act[: len(buffer)]))
    if top >= num_actions:
        raise OfflineRLError(
            f"--load-buffer-name {where}: holds action {top}, but {task} has {num_actions} actions; {fix}"
        )
    warn_if_recorded_elsewhere(belongs_to, task, source=where)


def evaluation_padding(buffer: Any, checkpoint: dict[str, Any] | None) -> str:
    """How the evaluation env pads frame stacks at a game's start: as the training data does (read
    from its episode starts; where none tells, as its converter recorded), as the checkpoint's data
    did when only watching, else gymnasium's."""
    from offline_rl.data import dataset_info  # heavy (Tianshou, torch): loaded only when used

    found = frame_padding_of(buffer) if buffer is not None else None
    recorded = dataset_info(buffer).get("frame_padding") if buffer is not None else None
    saved = ((checkpoint or {}).get("dataset_info") or {}).get("frame_padding")
    return found or recorded or saved or "reset"


def make_evaluation_env(
    config: AtariCQLConfig, task: str, padding: str, spec: EnvSpec | None = None, **kwargs: Any
) -> gym.Env:
    """One evaluation game of `task` under `--eval-env`'s protocol, stacks padded as the data's (a
    vector task as gymnasium makes it, or as the data records it: `spec`)."""
    return make_discrete_env(task, config.frames_stack, protocol=config.eval_env, padding=padding, spec=spec, **kwargs)


def describe_buffer(config: AtariCQLConfig, task: str, buffer: Any, padding: str, recorded: bool) -> None:
    """Whole Atari games with an untrained policy can run to the 27k-step cap: say what is happening."""
    from offline_rl.data.transitions import source_sizes  # heavy (Tianshou, torch): loaded only when used

    held = getattr(buffer, "nbytes", 0) / 2**30
    files = source_sizes(buffer)
    batches = (
        f", each batch from one of its {len(files)} files"
        if config.algorithm.batch_per_file and files is not None
        else ""
    )
    if not is_atari_game(task):
        print(
            f"{config.buffers_label()}: {len(buffer)} transitions{batches}; each evaluation plays "
            f"{config.run.evaluation_plan()} of {task}",
            flush=True,
        )
        return
    protocol = "sticky actions" if config.eval_env == "sticky" else "NoFrameskip-v4, no-op starts"
    if recorded:
        protocol = "as the dataset records it, its screens as 84×84 grayscale frames"
    print(
        f"{config.buffers_label()}: {len(buffer)} transitions ({held:.2f} GiB in RAM){batches}, stacks "
        f"{padding}-padded at episode starts; each evaluation plays {config.run.evaluation_plan('game')} of "
        f"{atari_game(task)} ({protocol}, up to 27 000 steps each)",
        flush=True,
    )


@dataclass
class EvaluatedData:
    """The data a run trains on and the env it is evaluated on, as `load_data_and_env` resolves them."""

    config: AtariCQLConfig  # with the task and the buffer files resolved
    buffer: Any  # None when only watching or exporting: the checkpoint describes the data
    env: gym.Env
    make_env: Callable[..., gym.Env]
    info: dict[str, Any]  # the data's description, saved with the run


def load_data_and_env(config: AtariCQLConfig, checkpoint: dict[str, Any] | None) -> EvaluatedData:
    """The buffer (`--load-buffer-name`), checked against the env it is evaluated on: `--task`, else the
    one the buffer records; an Atari game by `--eval-env`'s protocol unless the data is a recorded env's
    screens (Minari's atari/*), which then plays that env, its screens converted as the data's were. A
    `--task` that cannot work is named before any data is read; loading draws nothing from the run's
    generators."""
    from offline_rl.data import dataset_info  # heavy (Tianshou, torch): loaded only when used

    if config.run.needs_data:  # patterns a sweep or a preset gives (no shell expands them), as files
        config = replace(config, load_buffer_name=buffer_files(config.load_buffer_name))
    names = config.buffers_label()
    task_given = bool(config.task)
    given_env = make_evaluation_env(config, config.task, padding="reset") if task_given else None
    if not config.run.needs_data:
        buffer, task = None, config.task or DEFAULT_TASK
    else:
        buffer = load_atari_buffer(config)
        task = evaluation_task(config.task, dataset_env(dataset_info(buffer)), names, default=DEFAULT_TASK)
    config = replace(config, task=task)  # saved as resolved, so a resume or a table reads the env evaluated
    warn_atari_only_settings(task, config, ("frames_stack", "eval_env"))
    saved_info = dict((checkpoint or {}).get("dataset_info") or {})
    info = dataset_info(buffer) if buffer is not None else saved_info  # watching: the data the run trained on
    recorded = None if task_given else names  # where an unsafe recorded env is refused rather than skipped
    spec = (
        None
        if is_atari_game(task) and not info.get("atari_screens")
        else recorded_evaluation_spec(task, info, source=recorded)
    )
    say_recorded_settings(spec)
    if info.get("atari_screens") and spec is None:
        warnings.warn(
            f"{names} holds {info.get('task')}'s screens, but --task {task} plays --eval-env {config.eval_env}'s "
            f"protocol, whose frames are max-pooled over two emulator frames where the data's are not; give "
            f"--task {info.get('task')} (or none) to play the env the data records",
            TaskMismatchWarning,
            stacklevel=2,
        )
    if spec is not None and given_env is not None:
        given_env.close()
        given_env = None
    env = given_env if given_env is not None else make_evaluation_env(config, task, padding="reset", spec=spec)
    if buffer is not None:
        check_buffer_fits(config, task, buffer, env, task_given=task_given)
    padding = evaluation_padding(buffer, checkpoint)  # evaluation stacks start as the data's do
    info = {"name": names, **info, "frame_padding": padding}
    if buffer is not None:
        describe_buffer(config, task, buffer, padding, recorded=spec is not None)
    resolved = config

    def make(**kwargs: Any) -> gym.Env:
        return make_evaluation_env(resolved, task, padding, spec, **kwargs)

    return EvaluatedData(config, buffer, env, make, info)
