"""Datasets made locally by rolling out a behaviour policy: D4RL's "random" recipe (uniform actions,
continuous or discrete), or a saved policy (`offline_rl.algorithms.export.policy_file`), optionally
with Gaussian action noise, written as a D4RL HDF5 file or a Minari folder (`dataset_writers`).

Several envs step in parallel, and each env's episode is buffered until it ends, then appended; at the
requested size the running episodes end as time-outs and the file is cut to exactly that size. A run
is reproducible from its seed (envs seeded `seed, seed + 1, ...`, one generator for every action), and
its finished episodes are kept on disk as it goes (`collection_journal`), so an interrupted run
continues, with new seeds and new episodes, when the same command runs again.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import gymnasium as gym
import numpy as np

from offline_rl.core.errors import IgnoredFlagWarning, OfflineRLError
from offline_rl.core.files import check_output
from offline_rl.core.progress import progress_bar, shell_quoted
from offline_rl.core.settings import SEED_RANGE, check_ranges, setting
from offline_rl.data.fit import TaskMismatchWarning, same_task
from offline_rl.envs.atari import is_atari_game
from offline_rl.envs.make import make_env, with_flat_observations
from offline_rl.envs.mujoco import announce_classic_margins
from offline_rl.runs.collection_journal import CollectionJournal, journal_directory
from offline_rl.runs.dataset_writers import (
    OUTPUT_FORMATS,
    RANDOM_POLICY,
    DatasetWriter,
    EpisodeBuffer,
    Provenance,
    write_hdf5_dataset,
    write_minari_directory,
)

if TYPE_CHECKING:
    from offline_rl.algorithms.export.policy_file import PolicyNetwork

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CollectConfig:
    """What to roll out and where to write it (the flags of `python -m offline_rl.collect`)."""

    FLAG_GROUP: ClassVar[str] = "collection"

    task: str | None = setting(
        None,
        "gymnasium id with a bounded Box or a Discrete action space; none: the task the --policy file names",
        details=(
            "e.g. HalfCheetah-v4, or CartPole-v1 with --policy random; dict observations are recorded"
            " flattened. d4rl_cql.py's behaviour_policy.pt names its task."
        ),
    )
    output: Path = setting(help="HDF5 file (or, with --format minari, dataset directory) to write", required=True)
    size: int = setting(1_000_000, "number of transitions", minimum=1)
    policy: str = setting(
        RANDOM_POLICY, ("'random' (D4RL's uniform recipe) or a policy file (offline_rl.algorithms.export.policy_file)")
    )
    noise_std: float = setting(
        0.0,
        "Gaussian action noise, as a fraction of each dimension's half-range (0.1 on [-1, 1]: N(0, 0.1²))",
        minimum=0,
    )
    sample_policy: bool = setting(
        False, "draw the policy file's actions from its Gaussian (SAC snapshots), as D4RL collected, not its mean"
    )
    seed: int = setting(0, "seed of the envs (seed, seed + 1, ...) and of all action randomness", **SEED_RANGE)
    num_envs: int = setting(1, "environments stepped together", minimum=1)
    compression: str | None = setting(None, "HDF5 compression of the columns", choices=(None, "gzip", "lzf"))
    overwrite: bool = setting(False, "replace an existing output")
    progress: bool = setting(True, "show a progress bar")
    output_format: str = setting(
        "d4rl", "d4rl: one HDF5 file; minari: a Minari dataset directory", flag="--format", choices=OUTPUT_FORMATS
    )
    collect_checkpoint_every: int = setting(
        50_000,
        "keep the finished episodes every N transitions, to continue after a stop (0: never)",
        details=(
            "Kept in <output>.parts/ every N transitions and on Ctrl-C, so the same command run again"
            " continues an interrupted collection."
        ),
        minimum=0,
    )

    def validate(self) -> None:
        check_ranges(self)
        if self.policy == RANDOM_POLICY and self.noise_std > 0:
            warnings.warn(
                f"--noise-std {self.noise_std:g} is ignored with --policy random: the uniform actions need no noise",
                IgnoredFlagWarning,
                stacklevel=1,  # one place: shown once though validate() runs for the flags and again for the call
            )


def load_behaviour_policy(config: CollectConfig) -> PolicyNetwork:
    """The `--policy` file's network; torch is imported here, not with the module, so that collecting
    random data and the command's `--help` and flag errors go without it."""
    from offline_rl.algorithms.export.policy_file import load_policy  # heavy (torch): loaded only when used

    return load_policy(config.policy)


def with_task(config: CollectConfig) -> CollectConfig:
    """`config` with its task: --task, else the one the policy file was trained on (said in one line);
    a one-line error when neither names one."""
    if config.task:
        return config
    task = load_behaviour_policy(config).task if config.policy != RANDOM_POLICY else None
    if not task:
        named = "--policy random" if config.policy == RANDOM_POLICY else f"--policy {config.policy} names no task"
        raise OfflineRLError(f"--task: required ({named}); e.g. --task HalfCheetah-v4")
    log.info(f"task: {task}, the env {config.policy} was trained on (--task to collect on another)")
    return replace(config, task=task)


def check_policy_fits_task(
    network: PolicyNetwork, config: CollectConfig, obs_shape: tuple[int, ...], act_shape: tuple[int, ...]
) -> None:
    """A one-line error when the policy's inputs or outputs do not fit the task (naming the task it was
    trained on, the usual fix), and a warning when it was trained on another env of the same sizes
    (a Walker2d policy fits HalfCheetah): its data would not be the medium/expert data it looks like."""
    trained_on = f"; it was trained on {network.task}: give --task {network.task}" if network.task else ""
    observes, acts = int(network.obs_mean.shape[0]), int(network.action_low.shape[0])
    if observes != int(np.prod(obs_shape)):
        raise OfflineRLError(
            f"{config.policy}: policy observes {observes} numbers, but --task {config.task} observes {obs_shape}"
            f"{trained_on}"
        )
    if acts != int(np.prod(act_shape)):
        raise OfflineRLError(
            f"{config.policy}: policy outputs {acts} action dims, but --task {config.task} expects {act_shape}"
            f"{trained_on}"
        )
    if network.task and not same_task(network.task, config.task):
        warnings.warn(
            f"{config.policy} was trained on {network.task} but collects on --task {config.task}; "
            f"give --task {network.task} to collect where it learned to act",
            TaskMismatchWarning,
            stacklevel=2,
        )


def _behaviour(config: CollectConfig, space: gym.Space, obs_shape: tuple[int, ...], rng: np.random.Generator):
    """Return `act(obs_batch) -> action_batch` for the configured behaviour policy."""
    if isinstance(space, gym.spaces.Discrete):  # random only (check_collectable): uniform over the actions
        start, count = int(space.start), int(space.n)
        return lambda obs: start + rng.integers(count, size=len(obs))
    assert isinstance(space, gym.spaces.Box)
    low, high = space.low.astype(np.float32), space.high.astype(np.float32)
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise OfflineRLError(f"--task {config.task}: action space {space} is unbounded; expected a bounded Box")
    half_range = (high - low) / 2.0
    if config.policy == RANDOM_POLICY:

        def base(obs: np.ndarray) -> np.ndarray:
            return rng.uniform(low, high, size=(len(obs), *low.shape)).astype(np.float32)
    else:
        network = load_behaviour_policy(config)
        check_policy_fits_task(network, config, obs_shape, tuple(low.shape))

        if config.sample_policy and network.log_std is None:
            raise OfflineRLError(f"--sample-policy: {config.policy} holds no Gaussian to sample (a mean only)")

        def base(obs: np.ndarray) -> np.ndarray:
            flat = obs.reshape(len(obs), -1)
            return (network.sample(flat, rng) if config.sample_policy else network.act(flat)).reshape(
                len(obs), *low.shape
            )

    def act(obs: np.ndarray) -> np.ndarray:
        actions = base(obs)
        if config.noise_std > 0 and config.policy != RANDOM_POLICY:
            actions = actions + rng.normal(0.0, config.noise_std, size=actions.shape) * half_range
        return np.clip(actions, low, high).astype(np.float32)

    return act


def check_collectable(config: CollectConfig, action_space: gym.Space, observation_space: gym.Space) -> None:
    """A one-line error, with where to go instead, for what this collection cannot make: observations
    that are not Box (once dicts are flattened), a policy file on a discrete task (policy files are
    continuous actors; a trained discrete policy is `atari_qrdqn.py`'s to play), and an Atari game,
    which `atari_qrdqn.py --watch --save-buffer-name` stores a frame at a time rather than as the
    float rows of a D4RL file (~230 KB a transition)."""

    command = (
        f"python examples/atari_qrdqn.py --task {config.task} --watch --save-buffer-name "
        f"{shell_quoted(Path(config.output).name)}"
    )
    if isinstance(action_space, gym.spaces.Discrete) and is_atari_game(str(config.task)):
        raise OfflineRLError(
            f"--task {config.task}: an Atari game is collected with {command}, which stores each frame once"
        )
    if not isinstance(observation_space, gym.spaces.Box):
        raise OfflineRLError(
            f"--task {config.task}: its observations are {observation_space}; a dataset records Box observations "
            "(vectors, or dicts of them, which are flattened)"
        )
    if isinstance(action_space, gym.spaces.Discrete):
        if len(observation_space.shape or ()) != 1:
            raise OfflineRLError(
                f"--task {config.task}: discrete actions with observations of shape {observation_space.shape}; a "
                "discrete task's dataset records vector observations here (Atari games: examples/atari_qrdqn.py)"
            )
        if config.policy != RANDOM_POLICY:
            raise OfflineRLError(
                f"--policy {config.policy}: policy files act on continuous tasks, and --task {config.task} has "
                f"discrete actions; collect with --policy random, or play a trained QR-DQN policy with {command} "
                "--resume-path <its policy.pth>"
            )
        return
    if not isinstance(action_space, gym.spaces.Box):
        raise OfflineRLError(
            f"--task {config.task}: collection needs a continuous (Box) or discrete action space, got {action_space}"
        )


def collect_dataset(config: CollectConfig, *, size_flag: str = "--size") -> Path:
    """Roll out the behaviour policy and write a D4RL-format HDF5 file at `config.output`; a size the
    memory cannot hold is one line naming `size_flag`, the flag that set `config.size`."""
    config = with_task(config)
    config.validate()
    is_folder = config.output_format == "minari"  # a Minari dataset is a folder
    output = check_output(
        config.output, flag="--output", overwrite=config.overwrite, directory=is_folder, appears_whole=is_folder
    )
    probe = make_env(config.task)  # fail fast, with a clear message, on an unknown id
    native_obs_space = probe.observation_space  # a dict's, which a Minari dataset keeps as it is
    announce_classic_margins(probe, str(config.task))
    probe.close()
    envs = gym.vector.SyncVectorEnv(
        [lambda: with_flat_observations(make_env(str(config.task))) for _ in range(config.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    journal = None
    try:
        space = envs.single_action_space
        check_collectable(config, space, envs.single_observation_space)
        obs_shape = tuple(envs.single_observation_space.shape or ())
        discrete = isinstance(space, gym.spaces.Discrete)
        act_shape = () if discrete else tuple(space.shape)
        act_dtype = np.int64 if discrete else np.float32
        writer = DatasetWriter(config.size, obs_shape, act_shape, act_dtype, size_flag=size_flag)
        journal = _open_journal(config, output, writer)
        session = journal.session if journal else 0
        # A continued collection draws new actions and plays new games: repeating the first
        # session's would correlate the two halves of the data.
        rng = np.random.default_rng(config.seed if session == 0 else [config.seed, session])
        act = _behaviour(config, space, obs_shape, rng)
        _rollout(envs, act, config, writer, journal, first_seed=config.seed + session * config.num_envs)
        if config.output_format == "minari":
            write_minari_directory(output, writer, provenance(config), native_obs_space, space)
        else:
            write_hdf5_dataset(output, writer, provenance(config), config.compression)
        if journal:
            journal.remove()
    finally:
        if journal:
            journal.release()  # the parts stay for the next run of the command
        envs.close()
    return output


def provenance(config: CollectConfig) -> Provenance:
    """What the dataset's file records of how it was made."""
    policy = RANDOM_POLICY if config.policy == RANDOM_POLICY else str(Path(config.policy).resolve())
    return Provenance(str(config.task), policy, config.noise_std, config.seed, config.num_envs)


def _open_journal(config: CollectConfig, output: Path, writer: DatasetWriter) -> CollectionJournal | None:
    """The journal that keeps this collection's finished episodes, refilling `writer` with what an
    interrupted run of the same command kept; `None` with --collect-checkpoint-every 0."""
    if not config.collect_checkpoint_every:
        return None
    policy = RANDOM_POLICY if config.policy == RANDOM_POLICY else str(Path(config.policy).expanduser().resolve())
    settings = {
        "--task": config.task,
        "--policy": policy,
        "--noise-std": config.noise_std,
        "--size": config.size,
        "--num-envs": config.num_envs,
        "--seed": config.seed,
        "--format": config.output_format,
    }
    journal = CollectionJournal.open(
        journal_directory(output), settings, [writer], every=config.collect_checkpoint_every
    )
    if journal.session:
        log.info(
            f"continuing the collection kept in {journal.directory}: {writer.cursor} of {config.size} steps "
            "(whole episodes) were collected; the envs start new episodes"
        )
    return journal


def _rollout(
    envs: gym.vector.SyncVectorEnv,
    act: Any,
    config: CollectConfig,
    writer: DatasetWriter,
    journal: CollectionJournal | None,
    first_seed: int,
) -> None:
    """Step the envs until `writer` holds `config.size` steps; every `collect_checkpoint_every`
    steps, and on Ctrl-C, the finished episodes go to `journal`."""
    layout = writer.columns
    running = [EpisodeBuffer(layout.obs_shape, layout.act_shape, layout.act_dtype) for _ in range(config.num_envs)]
    obs, _ = envs.reset(seed=first_seed)
    steps = writer.cursor
    with progress_bar(
        total=config.size, initial=steps, unit="step", desc=f"collect {config.task}", disable=not config.progress
    ) as bar:
        try:
            while steps < config.size:
                actions = act(obs)
                next_obs, rewards, terminations, truncations, infos = envs.step(actions)
                finished = terminations | truncations
                for i in range(config.num_envs):
                    true_next = infos["final_obs"][i] if finished[i] else next_obs[i]
                    running[i].add(
                        obs[i],
                        actions[i],
                        float(rewards[i]),
                        bool(terminations[i]),
                        bool(truncations[i]) and not bool(terminations[i]),
                        true_next,
                    )
                    if finished[i]:
                        writer.append(running[i], data_ends_here=False)
                        running[i].clear()
                obs = next_obs
                steps += config.num_envs
                bar.update(min(config.num_envs, config.size - bar.n))
                if journal:
                    journal.keep_if_due([writer], [])
        except KeyboardInterrupt:
            if journal:
                journal.keep([writer], [])
                log.info(
                    f"interrupted after {steps} of {config.size} steps ({writer.cursor} in finished episodes, kept "
                    f"in {journal.directory}); run the same command again to continue"
                )
            raise
    for episode in running:
        if writer.full:
            break
        writer.append(episode, data_ends_here=True)
    if journal:
        journal.keep([writer], [])  # all of it: an interrupted write of the file loses nothing
