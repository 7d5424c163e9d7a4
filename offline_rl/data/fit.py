"""TODO"""

from __future__ import annotations

import dataclasses
import warnings
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from offline_rl.core.errors import OfflineRLError, OfflineRLWarning
from offline_rl.envs.adroit import adroit_task_of
from offline_rl.envs.antmaze import antmaze_of
from offline_rl.envs.atari import atari_game, is_atari_game
from offline_rl.envs.make import env_spec_from_json, make_env, with_flat_observations
from offline_rl.envs.maze2d import maze2d_of

if TYPE_CHECKING:
    from tianshou.data import ReplayBuffer


def check_dataset_fits_env(buffer: ReplayBuffer, task: str, *, source: str, env: gym.Env | None = None) -> None:
    """Refuse a dataset whose observation or action shape differs from `task`'s env (`env`, the one
    the run will evaluate on, when given: it is left open)."""
    made = env is None
    env = with_flat_observations(make_env(task)) if env is None else env  # dicts: as the data holds them
    try:
        # Through indexing, not `buffer.obs`: frame buffers rebuild observations and store none.
        obs_shape = tuple(np.asarray(buffer[np.array([0])].obs).shape[1:])
        expected_obs = tuple(env.observation_space.shape or ())
        if obs_shape != expected_obs:
            raise OfflineRLError(
                f"{source}: observations have shape {obs_shape}, but --task {task} observes {expected_obs}"
            )
        act = np.asarray(buffer.act[:1])
        space = env.action_space
        if isinstance(space, gym.spaces.Box):
            expected_act = tuple(space.shape)
            if tuple(act.shape[1:]) != expected_act:
                raise OfflineRLError(
                    f"{source}: actions have shape {tuple(act.shape[1:])}, but --task {task} expects {expected_act}"
                )
        elif isinstance(space, gym.spaces.Discrete):
            top = int(np.max(buffer.act[: len(buffer)]))
            if act.ndim != 1 or top >= int(space.n):
                raise OfflineRLError(
                    f"{source}: actions are not indices below {space.n} (found max {top}, shape "
                    f"{tuple(act.shape[1:])}), as --task {task} expects"
                )
    finally:
        if made:
            env.close()


class TaskMismatchWarning(OfflineRLWarning):
    """A dataset that says which env it belongs to is evaluated on another one."""


@dataclasses.dataclass(frozen=True)
class DatasetEnv:
    """The env a dataset belongs to, as the dataset itself says, and how it says it (for messages)."""

    task: str
    origin: str  # completes "<dataset> ...": "was recorded on Hopper-v5"


def dataset_env(info: dict[str, Any]) -> DatasetEnv | None:
    """The env a loaded dataset belongs to: the evaluation env a Minari dataset records (else the env
    it was recorded on), the task of a file `offline_rl.collect` wrote, or the gymnasium env of a named
    D4RL dataset (whose files record none). None when nothing says."""
    spec = env_spec_from_json(info.get("eval_env_spec"))
    recorded = spec.id if spec is not None else info.get("task")
    if recorded:
        return DatasetEnv(str(recorded), f"was recorded on {recorded}")
    if info.get("gymnasium_task"):
        task = str(info["gymnasium_task"])
        if adroit := adroit_task_of(task):  # D4RL's Adroit envs: Gymnasium-Robotics' hands with D4RL's rewards
            return DatasetEnv(task, f"is D4RL data of its {adroit} env (here: {task})")
        if maze2d_of(task):
            return DatasetEnv(task, f"is D4RL data of its Maze2D env (here: {task})")
        if antmaze_of(task):
            return DatasetEnv(task, f"is D4RL data of its AntMaze env (here: {task})")
        return DatasetEnv(task, f"is D4RL data of gym's {task.split('-')[0]} (gymnasium: {task})")
    return None


def same_task(recorded: str, task: str) -> bool:
    """Whether evaluating on `task` evaluates where data recorded on `recorded` came from: the same
    id, or for Atari the same game (an Atari evaluation's settings come from its protocol,
    `--eval-env`, not from how the id is spelled)."""
    if recorded == task:
        return True
    return is_atari_game(recorded) and is_atari_game(task) and atari_game(recorded) == atari_game(task)


def check_dataset_belongs_to_task(
    buffer: ReplayBuffer, task: str, *, source: str, env: gym.Env | None = None
) -> DatasetEnv | None:
    """`check_dataset_fits_env`, whose error names the env the dataset says it belongs to when that
    is another (the usual fix), with a warning when the shapes fit but the envs differ. Returns that
    env, or None when the dataset names none."""
    from offline_rl.data import dataset_info  # heavy (Tianshou, torch): loaded only when used

    belongs_to = dataset_env(dataset_info(buffer))
    try:
        check_dataset_fits_env(buffer, task, source=source, env=env)
    except OfflineRLError as error:
        if belongs_to is not None and not same_task(belongs_to.task, task):
            raise OfflineRLError(f"{error}; it {belongs_to.origin}: give --task {belongs_to.task}") from None
        raise
    warn_if_recorded_elsewhere(belongs_to, task, source=source)
    return belongs_to


def warn_if_recorded_elsewhere(belongs_to: DatasetEnv | None, task: str, *, source: str) -> None:
    """One line when a dataset belongs to another env id than `--task`. With other shapes it would
    not train, so the shapes agree: another version of the same env (which can differ in dynamics or
    rewards: Minari's MuJoCo datasets were made on the v5 envs, and the v4 Hopper and Walker2d also
    pay the healthy reward on the unhealthy step that ends an episode), or another robot of the same
    sizes (D4RL's walker2d data fits HalfCheetah), and the scores would not be those of the data's own
    task. A warning, not an error: evaluating elsewhere can be meant."""
    if belongs_to is not None and not same_task(belongs_to.task, task):
        warnings.warn(
            f"{source} {belongs_to.origin} but is evaluated on --task {task}; "
            f"give --task {belongs_to.task} to evaluate where the data came from",
            TaskMismatchWarning,
            stacklevel=2,
        )
