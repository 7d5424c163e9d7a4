"""The settings and steps of `examples/mujoco_sac.py`: an online SAC behaviour policy on a MuJoCo
locomotion task (Tianshou's `SAC` with the settings of Tianshou's `examples/mujoco/mujoco_sac.py`),
each of whose evaluations leaves a policy snapshot with its returns: the policies D4RL's recipe
plays (a medium one, about a third of the expert's return, and the expert at the end of training)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import gymnasium as gym
import numpy as np

from offline_rl.cli.flags import parse_config
from offline_rl.core.errors import OfflineRLError
from offline_rl.core.files import write_json
from offline_rl.core.resources import require_memory
from offline_rl.core.settings import check_ranges, setting
from offline_rl.envs.make import make_env
from offline_rl.envs.resumable import resumable_where_possible
from offline_rl.envs.scores import reference_scores
from offline_rl.runs.config import RunConfig
from offline_rl.runs.evaluation import EvaluationReporter

if TYPE_CHECKING:
    from offline_rl.runs.folder import RunFolder

SNAPSHOTS = "snapshots"
"""The run folder's folder of policy files, one per trained evaluation (`epoch-<E>.pt`)."""
SNAPSHOT_RETURNS = "returns.json"
"""Beside the snapshots: each one's epoch, env steps, file and evaluation returns, in order."""


@dataclass
class MujocoSACConfig:
    """The task and the online SAC learner (Tianshou's MuJoCo SAC settings by default)."""

    FLAG_GROUP: ClassVar[str] = "SAC behaviour policy"

    task: str = setting("HalfCheetah-v4", "gymnasium task with a Box action space (HalfCheetah-v4, Hopper-v5, ...)")
    buffer_size: int = setting(1_000_000, "replay size", minimum=1)
    hidden_sizes: list[int] = setting([256, 256], "hidden layers of the actor and of each critic", minimum=1)
    actor_lr: float = setting(1e-3, "actor's Adam learning rate", above=0)
    critic_lr: float = setting(1e-3, "critics' Adam learning rate", above=0)
    gamma: float = setting(0.99, "discount factor", minimum=0, maximum=1)
    tau: float = setting(0.005, "soft target-network update rate", minimum=0, maximum=1)
    alpha: float = setting(0.2, "entropy weight α (with --auto-alpha: tuned, starting at 1)", minimum=0)
    auto_alpha: bool = setting(False, "tune α towards an entropy of minus the action dimensions")
    alpha_lr: float = setting(3e-4, "Adam learning rate of log α with --auto-alpha", above=0)
    start_timesteps: int = setting(10_000, "env steps of uniform random actions before the policy acts", minimum=0)
    step_per_epoch: int = setting(
        5000, "env steps per epoch; each epoch ends with an evaluation and a snapshot", minimum=1
    )
    step_per_collect: int = setting(1, "env steps between updates", minimum=1)
    update_per_step: float = setting(1.0, "gradient updates per env step", above=0)
    n_step: int = setting(1, "n of the n-step TD target", minimum=1)
    training_num: int = setting(1, "training envs stepped together", minimum=1)
    checkpoint_replay: bool = setting(
        True, "write the replay beside each epoch's checkpoint.pth, so that --resume-path goes on with it"
    )
    run: RunConfig = field(default_factory=lambda: RunConfig(epoch=200, batch_size=256))

    def validate(self) -> None:
        check_ranges(self)


DESCRIPTION = "Train a SAC behaviour policy online, keeping a policy snapshot at each evaluation."


def config_from_args(argv: Sequence[str] | None) -> MujocoSACConfig:
    """The example's settings from its command line (and `--config` preset file)."""
    return parse_config(MujocoSACConfig(), argv, prog="examples/mujoco_sac.py", description=DESCRIPTION)


def build_sac(config: MujocoSACConfig, env: gym.Env, device: str) -> Any:
    """Tianshou's SAC as its MuJoCo example builds it: a tanh-Gaussian actor and two critics, MLPs."""
    from tianshou.algorithm import SAC  # heavy (Tianshou): loaded only when used
    from tianshou.algorithm.modelfree.sac import AutoAlpha, SACPolicy  # heavy (Tianshou): loaded only when used
    from tianshou.algorithm.optim import AdamOptimizerFactory  # heavy (Tianshou): loaded only when used
    from tianshou.utils.net.common import Net  # heavy (Tianshou, torch): loaded only when used
    from tianshou.utils.net.continuous import (  # heavy (Tianshou, torch): loaded only when used
        ContinuousActorProbabilistic,
        ContinuousCritic,
    )

    obs_shape = tuple(env.observation_space.shape or ())
    act_shape = tuple(env.action_space.shape or ())
    actor = ContinuousActorProbabilistic(
        preprocess_net=Net(state_shape=obs_shape, hidden_sizes=config.hidden_sizes),
        action_shape=act_shape,
        unbounded=True,
        conditioned_sigma=True,
    ).to(device)

    def critic() -> Any:
        net = Net(state_shape=obs_shape, action_shape=act_shape, hidden_sizes=config.hidden_sizes, concat=True)
        return ContinuousCritic(preprocess_net=net).to(device)

    alpha: Any = config.alpha
    if config.auto_alpha:
        alpha = AutoAlpha(-float(np.prod(act_shape)), 0.0, AdamOptimizerFactory(lr=config.alpha_lr)).to(device)
    return SAC(
        policy=SACPolicy(actor=actor, action_space=env.action_space),
        policy_optim=AdamOptimizerFactory(lr=config.actor_lr),
        critic=critic(),
        critic_optim=AdamOptimizerFactory(lr=config.critic_lr),
        critic2=critic(),
        critic2_optim=AdamOptimizerFactory(lr=config.critic_lr),
        tau=config.tau,
        gamma=config.gamma,
        alpha=alpha,
        n_step_return_horizon=config.n_step,
    ).to(device)


def export_sac_actor(algorithm: Any, env: gym.Env, path: Path, *, task: str) -> Path:
    """The SAC actor as a policy file (`offline_rl.algorithms.export.policy_file`), the file `collect
    --policy` plays: its deterministic action (the action scaling of tanh of the Gaussian's mean) and
    its Gaussian's log standard deviation, which `--sample-policy` draws from."""
    import torch  # heavy (torch): loaded only when used

    from offline_rl.algorithms.export.policy_file import PolicyNetwork, save_policy  # heavy (torch): likewise

    actor = algorithm.policy.actor
    linears = [m for part in (actor.preprocess, actor.mu) for m in part.modules() if isinstance(m, torch.nn.Linear)]
    space = env.action_space
    policy = PolicyNetwork(
        linears[0].in_features,
        linears[-1].out_features,
        [layer.out_features for layer in linears[:-1]],
        action_low=np.asarray(space.low, dtype=np.float32),  # type: ignore[attr-defined]
        action_high=np.asarray(space.high, dtype=np.float32),  # type: ignore[attr-defined]
        task=task,
        gaussian=True,
    )
    targets = [m for m in policy.mlp if isinstance(m, torch.nn.Linear)]
    (sigma,) = [m for m in actor.sigma.modules() if isinstance(m, torch.nn.Linear)]  # log σ of the last features
    with torch.no_grad():
        for source, target in zip([*linears, sigma], [*targets, policy.log_std], strict=True):
            target.weight.copy_(source.weight)
            target.bias.copy_(source.bias)
    return save_policy(policy, path)


def keep_snapshot(config: MujocoSACConfig, algorithm: Any, env: gym.Env, folder: RunFolder, record: dict) -> None:
    """After a trained evaluation: the policy it scored as `snapshots/epoch-<E>.pt`, and its returns
    added to `snapshots/returns.json` (a resumed run's evaluation made again replaces its entry)."""
    epoch = int(record["epoch"])
    directory = folder.log_path / SNAPSHOTS
    directory.mkdir(exist_ok=True)
    file = export_sac_actor(algorithm, env, directory / f"epoch-{epoch:04d}.pt", task=config.task)
    index = directory / SNAPSHOT_RETURNS
    entries = [e for e in (json.loads(index.read_text()) if index.is_file() else []) if e["epoch"] != epoch]
    env_steps = config.start_timesteps + epoch * config.step_per_epoch  # the random ones first
    entry = {"epoch": epoch, "env_steps": env_steps, "file": file.name}
    entry |= {key: record[key] for key in ("return_mean", "return_std", "normalized_score") if key in record}
    write_json(index, sorted([*entries, entry], key=lambda e: e["epoch"]))


def train_online(config: MujocoSACConfig, algorithm: Any, env: gym.Env, checkpoint: dict[str, Any] | None) -> dict:
    """Online SAC in a run folder (`offline_rl.runs.online`): uniform random actions for
    `--start-timesteps` env steps, then the policy's; a snapshot at each evaluation."""
    from offline_rl.data.online_replay import NullCheckedVectorReplayBuffer  # heavy (h5py, Tianshou): likewise
    from offline_rl.runs.online import OnlinePlan, train_online  # heavy (Tianshou, torch): likewise

    plan = OnlinePlan(
        task=config.task,
        algo_name="sac",
        label="SAC",
        saved={"config": asdict(config)},
        make_training_env=lambda: resumable_where_possible(make_env(config.task)),
        make_test_env=lambda **kwargs: make_env(config.task, **kwargs),
        replay=NullCheckedVectorReplayBuffer(config.buffer_size, buffer_num=config.training_num),
        training_num=config.training_num,
        step_per_epoch=config.step_per_epoch,
        step_per_collect=config.step_per_collect,
        update_per_step=config.update_per_step,
        checkpoint_replay=config.checkpoint_replay,
        make_reporter=lambda writer: d4rl_reporter(config.task, writer),
        next_step=f"its snapshots and their returns: {SNAPSHOTS}/{SNAPSHOT_RETURNS} beside {{best}}",
        random_steps=config.start_timesteps,
        on_evaluation=lambda folder, record: keep_snapshot(config, algorithm, env, folder, record),
    )
    return train_online(plan, algorithm, config.run, checkpoint)


def check_env(config: MujocoSACConfig, env: gym.Env) -> None:
    """One line now, rather than a traceback or the OOM killer hours later: a task SAC cannot act in
    (its actions not a Box), or a replay that cannot fit in memory once full (each step's observation
    and next observation, action, reward and flags)."""
    if not isinstance(env.action_space, gym.spaces.Box):
        raise OfflineRLError(
            f"--task {config.task}: SAC needs a continuous (Box) action space, got {env.action_space}; "
            "discrete tasks: examples/atari_qrdqn.py"
        )
    if not config.run.trains:
        return
    observation = int(np.prod(env.observation_space.shape or ())) * np.dtype(env.observation_space.dtype).itemsize
    action = int(np.prod(env.action_space.shape or ())) * np.dtype(env.action_space.dtype).itemsize
    need = config.buffer_size * (2 * observation + action + 19)
    subject = f"--buffer-size {config.buffer_size}: the replay, once full,"
    require_memory(need, subject, "give a smaller --buffer-size, or use a machine with more memory")


def play(config: MujocoSACConfig, algorithm: Any) -> dict[str, Any]:
    """`--watch`: `--test-num` episodes of the deterministic policy, printed as one line."""
    from offline_rl.runs.training import watch_policy  # heavy (Tianshou, torch): loaded only when used

    def make_test_env(**kwargs: Any) -> gym.Env:  # `render_mode` for --render and --save-video
        return make_env(config.task, **kwargs)

    return watch_policy(algorithm, make_test_env, config.run, d4rl_reporter(config.task), task=config.task)


def d4rl_reporter(task: str, writer: Any = None) -> EvaluationReporter:
    """Evaluations scored as D4RL normalises `task`'s returns, where D4RL has references for it."""
    scores = reference_scores(task)
    return EvaluationReporter(writer=writer, **({"ref_min": scores[0], "ref_max": scores[1]} if scores else {}))
