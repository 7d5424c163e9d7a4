"""The settings and steps of `examples/atari_qrdqn.py`: an online QR-DQN behaviour policy (Tianshou's
`QRDQN` on its off-policy trainer, ε-greedy exploration, frame-stacked replay; an MLP head for vector
tasks such as CartPole), and with `--watch --save-buffer-name` the offline dataset it plays, kept on
disk as it goes so that the same command continues an interrupted collection."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import gymnasium as gym
import numpy as np

from offline_rl.cli.flags import parse_config
from offline_rl.core.resources import require_memory
from offline_rl.core.settings import check_ranges, require, setting
from offline_rl.envs.atari import is_atari_game, make_discrete_env
from offline_rl.runs.config import RunConfig
from offline_rl.runs.evaluation import EvaluationReporter, human_normalised

if TYPE_CHECKING:
    from offline_rl.data.online_replay import NullCheckedVectorReplayBuffer


@dataclass
class AtariQRDQNConfig:
    """The game, the online QR-DQN learner, and what `--watch` collects."""

    FLAG_GROUP: ClassVar[str] = "QR-DQN behaviour policy"

    task: str = setting(
        "PongNoFrameskip-v4",
        "Atari id (PongNoFrameskip-v4, ALE/Breakout-v5, ...) or another discrete-action task (CartPole-v1)",
    )
    frames_stack: int = setting(4, "frames per observation (Atari games; vector tasks are not stacked)", minimum=1)
    eps_test: float = setting(0.005, "ε while evaluating, and while playing with --watch", minimum=0, maximum=1)
    eps_train: float = setting(1.0, "ε at the start of training", minimum=0, maximum=1)
    eps_train_final: float = setting(0.05, "ε after --eps-decay-steps env steps", minimum=0, maximum=1)
    eps_decay_steps: int = setting(1_000_000, "env steps over which ε falls linearly to --eps-train-final", minimum=1)
    buffer_size: int = setting(
        100_000, "replay size when training; transitions to write with --save-buffer-name", minimum=1
    )
    lr: float = setting(1e-4, "Adam learning rate", above=0)
    gamma: float = setting(0.99, "discount factor", minimum=0, maximum=1)
    num_quantiles: int = setting(200, "quantiles of the QR-DQN head", minimum=2)
    hidden_sizes: list[int] = setting([128, 128], "MLP hidden layers (vector observations only)", minimum=1)
    n_step: int = setting(3, "n of the n-step TD target", minimum=1)
    target_update_freq: int = setting(500, "updates between hard target-network copies", minimum=1)
    step_per_epoch: int = setting(100_000, "env steps per epoch", minimum=1)
    step_per_collect: int = setting(10, "env steps between updates", minimum=1)
    update_per_step: float = setting(0.1, "gradient updates per env step", above=0)
    reward_clip: bool = setting(True, "training envs clip rewards to [-1, 1] (Dopamine, DQN)")
    episode_life: bool = setting(
        False, "training envs end an episode at each lost life while the game plays on (DeepMind's DQN)"
    )
    training_num: int = setting(10, "training envs stepped together", minimum=1)
    # This command's own output, not a setting of the run whose policy plays: never taken from it.
    save_buffer_name: str | None = setting(
        None, "with --watch: write the played transitions here (.hdf5)", per_invocation=True
    )
    overwrite: bool = setting(False, "with --save-buffer-name: replace an existing file", per_invocation=True)
    collect_checkpoint_every: int = setting(
        50_000,
        ("with --save-buffer-name: keep what was collected every N transitions, to continue after a stop (0: never)"),
        details=(
            "Kept in <name>.parts/ every N transitions and on Ctrl-C, so the same command run again "
            "continues an interrupted collection."
        ),
        minimum=0,
        per_invocation=True,
    )
    checkpoint_replay: bool = setting(
        True,
        "write the replay beside each epoch's checkpoint.pth, so that --resume-path goes on with it",
        details=(
            "replay.hdf5 takes about 7 KB per Atari transition; without it a resumed run starts with an empty replay."
        ),
    )
    run: RunConfig = field(default_factory=lambda: RunConfig(epoch=100, batch_size=32))

    def validate(self) -> None:
        check_ranges(self)
        require(not self.save_buffer_name or self.run.watch, "--save-buffer-name collects while playing: add --watch")
        require(
            not (self.save_buffer_name and self.run.save_video),
            "--save-video records --watch's evaluation episodes, not a collection: give it without --save-buffer-name",
        )


def config_from_args(argv: Sequence[str] | None) -> AtariQRDQNConfig:
    """The example's settings from its command line (and `--config` preset file)."""
    return parse_config(
        AtariQRDQNConfig(),
        argv,
        prog="examples/atari_qrdqn.py",
        description="Train a QR-DQN behaviour policy online, or play it to write an offline buffer.",
    )


def build_qrdqn(config: AtariQRDQNConfig, env: gym.Env, device: str) -> Any:
    from tianshou.algorithm import QRDQN  # heavy (Tianshou): loaded only when used
    from tianshou.algorithm.modelfree.qrdqn import QRDQNPolicy  # heavy (Tianshou): loaded only when used
    from tianshou.algorithm.optim import AdamOptimizerFactory  # heavy (Tianshou): loaded only when used

    from offline_rl.algorithms.discrete_cql.networks import (  # heavy (torch): loaded only when used
        QuantileMLP,
        QuantileNatureCNN,
    )
    from offline_rl.core.compat import cache_tianshou_jit  # heavy (Tianshou, torch): loaded only when used

    cache_tianshou_jit()  # before Tianshou's QRDQN compiles its numba functions: ~4 s of every start
    shape, num_actions = tuple(env.observation_space.shape or ()), int(env.action_space.n)
    model: Any
    if len(shape) == 3:
        model = QuantileNatureCNN(shape, num_actions, config.num_quantiles)
    else:
        model = QuantileMLP(int(np.prod(shape)), num_actions, config.num_quantiles, config.hidden_sizes)
    model = model.to(device)
    policy = QRDQNPolicy(
        model=model,
        action_space=env.action_space,
        observation_space=env.observation_space,
        eps_training=config.eps_train,
        eps_inference=config.eps_test,
    )
    return QRDQN(
        policy=policy,
        optim=AdamOptimizerFactory(lr=config.lr),
        gamma=config.gamma,
        num_quantiles=config.num_quantiles,
        n_step_return_horizon=config.n_step,
        target_update_freq=config.target_update_freq,
    ).to(device)


def update_bytes(config: AtariQRDQNConfig, env: gym.Env) -> dict[str, int]:
    """The memory an update takes (`offline_rl.algorithms.discrete_cql.algorithm.training_bytes`: the
    same network), by the flag that sets each part."""
    from offline_rl.algorithms.discrete_cql import DiscreteCQLConfig  # heavy (torch): loaded only when used
    from offline_rl.algorithms.discrete_cql.algorithm import training_bytes  # heavy (torch): likewise

    network = DiscreteCQLConfig(num_quantiles=config.num_quantiles, hidden_sizes=config.hidden_sizes)
    quantiles = f"--num-quantiles {config.num_quantiles}"
    return training_bytes(env.observation_space, env.action_space, network, config.run.batch_size, cnn_flag=quantiles)


def require_replay_memory(config: AtariQRDQNConfig, env: gym.Env) -> None:
    """One line now, rather than the OOM killer hours later, when the replay (training) or the
    recorded dataset (`--save-buffer-name`) cannot fit in memory once full. Counted at least: each
    step's frame (a game's replay stores each frame once) or observation, plus 19 bytes of action,
    reward and flags; a collection also holds one env's share twice while its recordings merge."""

    if not config.run.trains and not config.save_buffer_name:
        return
    space = env.observation_space
    shape = tuple(space.shape or ())
    frame = shape[1:] if is_atari_game(config.task) else shape
    per_step = int(np.prod(frame)) * np.dtype(space.dtype).itemsize + 19
    need = config.buffer_size * per_step
    if config.run.watch:
        envs = min(config.training_num, config.buffer_size)
        need += need // envs
        subject = f"--buffer-size {config.buffer_size} with --save-buffer-name: recording the dataset"
    else:
        subject = f"--buffer-size {config.buffer_size}: the replay, once full,"
    require_memory(need, subject, "give a smaller --buffer-size, or use a machine with more memory")


def collection_plan(config: AtariQRDQNConfig) -> Any:
    """`--save-buffer-name`'s collection; a continuation must repeat the flags in its settings."""
    from offline_rl.runs.discrete_collection import CollectionPlan  # h5py: kept out of --help's start

    policy = Path(config.run.resume_path).expanduser().resolve() if config.run.resume_path else None
    return CollectionPlan(
        task=config.task,
        frames_stack=config.frames_stack,
        size=config.buffer_size,
        num_envs=config.training_num,
        seed=config.run.seed,
        output=Path(config.save_buffer_name or "").expanduser(),
        checkpoint_every=config.collect_checkpoint_every,
        overwrite=config.overwrite,
        settings={
            "--task": config.task,
            "--resume-path": str(policy) if policy else "(none: an untrained policy)",
            "--eps-test": config.eps_test,
            "--buffer-size": config.buffer_size,
            "--training-num": config.training_num,
            "--frames-stack": config.frames_stack,
            "--seed": config.run.seed,
        },
    )


def play(config: AtariQRDQNConfig, algorithm: Any) -> dict[str, Any]:
    """`--watch`: evaluate at ε = eps_test, or with `--save-buffer-name` collect a dataset."""
    from offline_rl.runs.discrete_collection import collect_buffer  # h5py: kept out of --help's start
    from offline_rl.runs.training import watch_policy  # heavy (Tianshou, torch): loaded only when used

    algorithm.policy.set_eps_inference(config.eps_test)
    if config.save_buffer_name:
        if config.run.resume_path is None:
            print("no --resume-path: playing with an untrained policy")
        return collect_buffer(collection_plan(config), algorithm.policy)

    def make_env(**kwargs: Any) -> gym.Env:  # `render_mode` for --render and --save-video
        return make_discrete_env(config.task, config.frames_stack, **kwargs)

    reporter = EvaluationReporter(**human_normalised(config.task))
    return watch_policy(algorithm, make_env, config.run, reporter, task=config.task)


def train_online(config: AtariQRDQNConfig, algorithm: Any, checkpoint: dict[str, Any] | None = None) -> dict[str, Any]:
    """Tianshou's off-policy trainer (`offline_rl.runs.online`) with ε decaying from eps_train to
    eps_train_final over `eps_decay_steps` env steps. A resumed run goes on at the epoch, env step and
    ε it reached, with its replay, and its target network copied on the original schedule."""
    from offline_rl.core.compat import (  # heavy (Tianshou, torch): loaded only when used
        set_target_update_counter,
        target_update_counter,
    )
    from offline_rl.runs.online import OnlinePlan, train_online  # heavy (Tianshou, torch): likewise

    def make_training_env() -> gym.Env:
        return make_discrete_env(
            config.task, config.frames_stack, clip_rewards=config.reward_clip, life_loss=config.episode_life
        )

    def make_test_env(**kwargs: Any) -> gym.Env:  # `render_mode` for --render and --video-interval
        return make_discrete_env(config.task, config.frames_stack, **kwargs)

    plan = OnlinePlan(
        task=config.task,
        algo_name="qrdqn",
        label="QR-DQN",
        saved={"config": asdict(config)},
        make_training_env=make_training_env,
        make_test_env=make_test_env,
        replay=online_replay(config),
        training_num=config.training_num,
        step_per_epoch=config.step_per_epoch,
        step_per_collect=config.step_per_collect,
        update_per_step=config.update_per_step,
        checkpoint_replay=config.checkpoint_replay,
        make_reporter=lambda writer: EvaluationReporter(writer=writer, **human_normalised(config.task)),
        next_step="collect a dataset with --watch --resume-path {best} --save-buffer-name expert.hdf5",
        keep=lambda: {TARGET_UPDATE_COUNTER: target_update_counter(algorithm)},
        restore=lambda saved: set_target_update_counter(algorithm, int(saved.get(TARGET_UPDATE_COUNTER, 0))),
        updates_done=lambda: target_update_counter(algorithm),  # eval curves against updates
        at_env_step=lambda env_step: algorithm.policy.set_eps_training(training_epsilon(config, env_step)),
    )
    return train_online(plan, algorithm, config.run, checkpoint)


def online_replay(config: AtariQRDQNConfig) -> NullCheckedVectorReplayBuffer:
    """The replay online training fills: a game's stores each frame once and stacks on sampling."""
    from offline_rl.data.online_replay import (
        NullCheckedVectorReplayBuffer,  # heavy (h5py, Tianshou): loaded only when used
    )

    stacked = is_atari_game(config.task)
    return NullCheckedVectorReplayBuffer(
        config.buffer_size,
        buffer_num=config.training_num,
        ignore_obs_next=True,
        save_only_last_obs=stacked,
        stack_num=config.frames_stack if stacked else 1,
    )


def training_epsilon(config: AtariQRDQNConfig, env_step: int) -> float:
    """ε at `env_step`: linear from eps_train to eps_train_final over `eps_decay_steps`, then constant."""
    fraction = min(env_step / config.eps_decay_steps, 1.0)
    return config.eps_train - fraction * (config.eps_train - config.eps_train_final)


TARGET_UPDATE_COUNTER = "target_update_counter"
"""Checkpoint field: QR-DQN's update count, which times its target-network copies."""
