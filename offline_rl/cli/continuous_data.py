"""The steps every continuous-action offline program shares: its data settings, which env a dataset
is evaluated on, loading and checking the data, and the reference returns of its score. The programs
(`examples/d4rl_cql.py`, `d4rl_td3_bc.py`, `d4rl_bc.py`) add their algorithm's settings to these."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from offline_rl.cli.flags import parse_config
from offline_rl.cli.programs import training_command
from offline_rl.cli.task_choice import default_task_misfit, evaluation_task
from offline_rl.core.errors import OfflineRLError
from offline_rl.core.settings import check_ranges, require, setting
from offline_rl.data.fit import check_dataset_belongs_to_task, dataset_env
from offline_rl.envs.d4rl_catalogue import kitchen_evaluation_elsewhere
from offline_rl.envs.make import (
    episode_limit,
    make_env,
    recorded_evaluation_spec,
    with_flat_observations,
)
from offline_rl.envs.mujoco import announce_classic_margins
from offline_rl.envs.scores import environment_key, reference_scores

DEFAULT_TASK = "HalfCheetah-v4"  # Tianshou's classic MuJoCo example's; used when the dataset names no env
Settings = TypeVar("Settings")


@dataclass
class ContinuousDataSettings:
    """What to train on: a program's settings class adds its run and its algorithm to these."""

    FLAG_GROUP: ClassVar[str] = "data"

    task: str | None = setting(
        None,
        "gymnasium id with a Box action space to evaluate on; none: the env the dataset belongs to, "
        f"else {DEFAULT_TASK}",
        details=(
            "A D4RL name evaluates on its v4 env, a Minari dataset or a collected file on the env it "
            "records (a Minari dataset's own env id with its recorded settings). Gymnasium-Robotics "
            "ids work when that package is installed."
        ),
    )
    dataset: str | None = setting(
        None,
        "D4RL name or HDF5 file, Minari id or directory, or Tianshou buffer; "
        "none: a random-policy dataset generated for --task and cached",
    )
    dataset_size: int = setting(100_000, "transitions in the generated default dataset", minimum=1)

    @property
    def starts_from_final_weights(self) -> bool:
        """Whether the command fine-tunes online (`--online-steps`), which may start from a finished offline
        run's `policy_last.pth` as from its `checkpoint.pth` (`require_training_checkpoint`)."""
        finetune = getattr(self, "finetune", None)
        return finetune is not None and finetune.fine_tunes


def check_with_fine_tuning(config: Any) -> None:
    """The checks of a program that fine-tunes online (`config.finetune`): its own settings' ranges, and
    what `--online-steps` cannot be combined with, in one line naming the flag."""
    check_ranges(config)
    finetune = config.finetune
    if finetune.fine_tunes:
        require(
            config.run.num_seeds == 1,
            f"--online-steps {finetune.online_steps}: fine-tuning plays one env per run; fine-tune each seed "
            "alone (without --num-seeds)",
        )


def settings_reader(settings_class: type[Settings], prog: str, algorithm: str) -> Callable[..., Settings]:
    """A program's `config_from_args`: its settings from its command line (and `--config` preset file)."""
    description = f"Train {algorithm} offline on a D4RL/Minari/Tianshou dataset and evaluate it in gymnasium."

    def config_from_args(argv: Sequence[str] | None) -> Settings:
        return parse_config(settings_class(), argv, prog=prog, description=description)

    return config_from_args


def make_continuous_env(task: str, spec: EnvSpec | None = None, **kwargs: Any) -> gym.Env:
    """The evaluation env (`spec`, the dataset's own record of `task`, when given); a one-line error
    when its actions are not continuous. Dict observations (goal-conditioned mazes: observation,
    achieved and desired goal) are flattened in the order the Minari loader flattens them."""
    env = make_env(task, spec=spec, **kwargs)
    if not isinstance(env.action_space, gym.spaces.Box):
        raise OfflineRLError(
            f"--task {task}: these algorithms need a continuous (Box) action space, got {env.action_space}; "
            "discrete tasks train with python examples/atari_cql.py"
        )
    return with_flat_observations(env)


def load_training_data(config: ContinuousDataSettings) -> tuple[Any, str]:
    """The dataset named by --dataset (or the generated default), checked against the env the run
    evaluates on, described; and that env's id: --task, else the one the dataset belongs to."""
    from offline_rl.data import (  # heavy (h5py, Tianshou, torch, tqdm): loaded only when used
        dataset_info,
        dataset_stats,
        load_dataset,
    )
    from offline_rl.data.transitions import has_discrete_actions  # heavy (Tianshou, torch): loaded only when used
    from offline_rl.runs.default_dataset import ensure_random_dataset  # h5py, tqdm: kept out of --help's start

    guess = config.task or DEFAULT_TASK  # the time limit of a file that says neither its env nor its ends
    if config.dataset is None:
        make_continuous_env(guess).close()  # a discrete --task is named before its data is generated
    if config.task is None and (elsewhere := kitchen_evaluation_elsewhere(config.dataset)):
        raise OfflineRLError(f"--dataset {config.dataset}: {elsewhere}")  # before a download of data it cannot use
    source = config.dataset or str(ensure_random_dataset(guess, config.dataset_size, seed=0))
    buffer = load_dataset(source, download=True, max_episode_steps=episode_limit(guess))
    stats, info = dataset_stats(buffer), dataset_info(buffer)
    name = info.get("name", source)
    if config.task is None and (elsewhere := kitchen_evaluation_elsewhere(name)):
        raise OfflineRLError(f"--dataset {source}: {elsewhere}")  # D4RL's file under its own name
    if has_discrete_actions(buffer):
        recorded = f" (recorded on {info['task']})" if info.get("task") else ""
        raise OfflineRLError(
            f"--dataset {source}: its actions are discrete{recorded}; this program needs continuous ones. Train on it "
            f"with discrete CQL: {training_command([source], discrete=True)}"
        )
    given = config.task if config.dataset is not None else guess  # the generated dataset is the task's own
    task = evaluation_task(given, dataset_env(info), name, default=DEFAULT_TASK)
    env = make_continuous_env(task, recorded_evaluation_spec(task, info, source=None if given else source))
    announce_classic_margins(env, task)
    try:
        check_dataset_belongs_to_task(buffer, task, source=source, env=env)
    except OfflineRLError as error:
        if given is None and dataset_env(info) is None:
            raise OfflineRLError(f"{error}; {default_task_misfit(name, DEFAULT_TASK)}") from None
        raise
    finally:
        env.close()
    print(
        f"dataset {name}: {stats.transitions} transitions, "
        f"{stats.episodes} episodes, return {stats.return_mean:.1f} (min {stats.return_min:.1f}, "
        f"max {stats.return_max:.1f}), {stats.terminated} terminated / {stats.truncated} truncated"
        + (f"; observations: {info['observations']}" if info.get("observations") else "")
    )
    return buffer, task


def reference_range(task: str, info: dict[str, Any]) -> tuple[float | None, float | None]:
    """D4RL's (random, expert) returns for the normalised score: the dataset's own when the run
    evaluates on the dataset's env (any version of it), else the task's."""
    belongs_to = dataset_env(info)
    own_env = belongs_to is None or environment_key(belongs_to.task) == environment_key(task)
    if own_env and info.get("ref_min_score") is not None and info.get("ref_max_score") is not None:
        return float(info["ref_min_score"]), float(info["ref_max_score"])
    scores = reference_scores(task)
    return (scores[0], scores[1]) if scores else (None, None)
