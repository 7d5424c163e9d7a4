"""The experiment behind `examples/atari_qrdqn.py`: an online QR-DQN behaviour policy, and the
offline dataset it plays.

- Training (default): Tianshou's `QRDQN` on its off-policy trainer, ε-greedy exploration decaying
  from 1 to 0.05 over the first million environment steps, Tianshou's frame-stacked replay buffer.
- `--watch`: play with the policy from `--resume-path` (or, without one, an untrained policy, so
  the pipeline runs end to end on a machine with no pretrained model) at ε = `--eps-test`. With
  `--save-buffer-name`, `--buffer-size` transitions are written as a `FrameStackBuffer` (each frame
  stored once), atomically, with a progress bar; rewards are stored unclipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tqdm import tqdm

from offline_rl.checkpoint import load_checkpoint, restore_algorithm, save_checkpoint
from offline_rl.cli import FlagParser, pick_device
from offline_rl.data import save_buffer
from offline_rl.data.frame_stack import FrameStackBufferBuilder, merge_frame_stack_buffers
from offline_rl.discrete_cql.networks import QuantileNatureCNN
from offline_rl.envs import make_atari_env
from offline_rl.errors import OfflineRLError
from offline_rl.evaluation import EvaluationReporter
from offline_rl.training import configure_torch, new_log_path, plain, vector_envs, watch


@dataclass
class AtariQRDQNConfig:
    task: str = "PongNoFrameskip-v4"
    seed: int = 0
    eps_test: float = 0.005
    eps_train: float = 1.0
    eps_train_final: float = 0.05
    buffer_size: int = 100_000
    lr: float = 1e-4
    gamma: float = 0.99
    num_quantiles: int = 200
    n_step: int = 3
    target_update_freq: int = 500
    epoch: int = 100
    step_per_epoch: int = 100_000
    step_per_collect: int = 10
    update_per_step: float = 0.1
    batch_size: int = 32
    training_num: int = 10
    test_num: int = 10
    frames_stack: int = 4
    logdir: str = "log"
    render: float = 0.0
    device: str = "auto"
    threads: int = 0
    matmul_precision: str = "highest"
    resume_path: str | None = None
    watch: bool = False
    save_buffer_name: str | None = None


def build_parser() -> FlagParser:
    d = AtariQRDQNConfig()
    parser = FlagParser(
        prog="examples/atari_qrdqn.py",
        description="Train a QR-DQN behaviour policy online, or play it to write an offline buffer.",
    )
    parser.add_argument("--task", default=d.task)
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--eps-test", type=float, default=d.eps_test)
    parser.add_argument("--eps-train", type=float, default=d.eps_train)
    parser.add_argument("--eps-train-final", type=float, default=d.eps_train_final)
    parser.add_argument(
        "--buffer-size",
        type=int,
        default=d.buffer_size,
        help="replay size when training; transitions to write with --save-buffer-name",
    )
    parser.add_argument("--lr", type=float, default=d.lr)
    parser.add_argument("--gamma", type=float, default=d.gamma)
    parser.add_argument("--num-quantiles", type=int, default=d.num_quantiles)
    parser.add_argument("--n-step", type=int, default=d.n_step)
    parser.add_argument("--target-update-freq", type=int, default=d.target_update_freq)
    parser.add_argument("--epoch", type=int, default=d.epoch)
    parser.add_argument("--step-per-epoch", type=int, default=d.step_per_epoch)
    parser.add_argument("--step-per-collect", type=int, default=d.step_per_collect)
    parser.add_argument("--update-per-step", type=float, default=d.update_per_step)
    parser.add_argument("--batch-size", type=int, default=d.batch_size)
    parser.add_argument("--training-num", type=int, default=d.training_num)
    parser.add_argument("--test-num", type=int, default=d.test_num)
    parser.add_argument("--frames-stack", type=int, default=d.frames_stack)
    parser.add_argument("--logdir", default=d.logdir)
    parser.add_argument("--render", type=float, default=d.render)
    parser.add_argument("--device", default=d.device)
    parser.add_argument("--threads", type=int, default=d.threads)
    parser.add_argument("--matmul-precision", default=d.matmul_precision, choices=["highest", "high", "medium"])
    parser.add_argument("--resume-path", default=None, help="a policy.pth written by this script")
    parser.add_argument("--watch", action="store_true", help="play instead of training (and collect a buffer)")
    parser.add_argument("--save-buffer-name", default=None, help="with --watch: write the played transitions here")
    return parser


def config_from_args(argv: Sequence[str] | None) -> AtariQRDQNConfig:
    args = build_parser().parse_args(argv)
    for flag in (
        "buffer_size",
        "epoch",
        "step_per_epoch",
        "step_per_collect",
        "batch_size",
        "training_num",
        "test_num",
        "frames_stack",
        "num_quantiles",
        "n_step",
        "target_update_freq",
    ):
        if getattr(args, flag) <= 0:
            raise OfflineRLError(f"--{flag.replace('_', '-')} {getattr(args, flag)}: expected a positive integer")
    for flag in ("eps_test", "eps_train", "eps_train_final"):
        if not 0 <= getattr(args, flag) <= 1:
            raise OfflineRLError(f"--{flag.replace('_', '-')} {getattr(args, flag)}: expected a probability")
    if args.save_buffer_name and not args.watch:
        raise OfflineRLError("--save-buffer-name collects while playing: add --watch")
    return AtariQRDQNConfig(**vars(args))


def build_qrdqn(config: AtariQRDQNConfig, env: gym.Env, device: str) -> Any:
    from tianshou.algorithm import QRDQN
    from tianshou.algorithm.modelfree.qrdqn import QRDQNPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory

    model = QuantileNatureCNN(env.observation_space.shape, int(env.action_space.n), config.num_quantiles).to(device)
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


def collect_buffer(config: AtariQRDQNConfig, policy: Any, path: Path) -> dict[str, Any]:
    """Play `buffer_size` steps in `training_num` envs at ε = eps_test; write a FrameStackBuffer."""
    from tianshou.data import Batch

    num_envs = min(config.training_num, config.buffer_size)
    envs = [make_atari_env(config.task, config.frames_stack) for _ in range(num_envs)]
    builders = [
        FrameStackBufferBuilder(stack_num=config.frames_stack, max_frames=config.buffer_size // num_envs + 2048)
        for _ in envs
    ]
    obs = np.stack([env.reset(seed=config.seed + i)[0] for i, env in enumerate(envs)])
    returns, running = [], np.zeros(num_envs)
    policy.eval()
    with tqdm(total=config.buffer_size, unit="step", desc=f"collect {config.task}") as bar:
        while bar.n < config.buffer_size:
            with torch.no_grad():
                result = policy(Batch(obs=obs, info=Batch()))
            actions = policy.add_exploration_noise(np.asarray(result.act), Batch(obs=obs))
            for i, env in enumerate(envs):
                if bar.n >= config.buffer_size:
                    break
                next_obs, reward, terminated, truncated, _ = env.step(int(actions[i]))
                builders[i].add(obs[i], int(actions[i]), float(reward), terminated, truncated, next_obs)
                running[i] += reward
                if terminated or truncated:
                    returns.append(running[i])
                    running[i] = 0.0
                    next_obs, _ = env.reset()
                obs[i] = next_obs
                bar.update(1)
    buffer = merge_frame_stack_buffers([b.build() for b in builders if len(b)])
    save_buffer(buffer, path, compression="gzip")
    for env in envs:
        env.close()
    summary = {
        "transitions": len(buffer),
        "episodes": len(returns),
        "return_mean": float(np.mean(returns)) if returns else float("nan"),
        "bytes_per_transition": buffer.nbytes / len(buffer),
    }
    print(
        f"wrote {path}: {summary['transitions']} transitions, {summary['episodes']} finished episodes, "
        f"mean return {summary['return_mean']:.2f}, {summary['bytes_per_transition']:.0f} bytes/transition in RAM"
        if returns
        else f"wrote {path}: {summary['transitions']} transitions (no episode finished), "
        f"{summary['bytes_per_transition']:.0f} bytes/transition in RAM"
    )
    return summary


def run(config: AtariQRDQNConfig) -> dict[str, Any]:
    from tianshou.data import Collector, VectorReplayBuffer
    from tianshou.trainer import OffPolicyTrainerParams
    from tianshou.utils import TensorboardLogger
    from torch.utils.tensorboard import SummaryWriter

    device = pick_device(config.device)
    configure_torch(device, config.threads, config.matmul_precision, config.seed)
    env = make_atari_env(config.task, config.frames_stack)
    if not isinstance(env.action_space, gym.spaces.Discrete):
        raise OfflineRLError(f"--task {config.task}: expected an Atari task with discrete actions")
    checkpoint = load_checkpoint(config.resume_path, device) if config.resume_path else None
    saved = (checkpoint or {}).get("config", {})
    if saved.get("num_quantiles") and saved["num_quantiles"] != config.num_quantiles:
        # the network's shape is the checkpoint's, whatever the flags say
        print(f"using --num-quantiles {saved['num_quantiles']} from {config.resume_path}")
        config = replace(config, num_quantiles=int(saved["num_quantiles"]))
    algorithm = build_qrdqn(config, env, device)
    if checkpoint is not None:
        restore_algorithm(algorithm, checkpoint, str(config.resume_path))
    elif config.watch:
        print("no --resume-path: playing with an untrained policy")
    policy = algorithm.policy

    def make() -> gym.Env:
        return make_atari_env(config.task, config.frames_stack)

    if config.watch:
        policy.set_eps_inference(config.eps_test)
        if config.save_buffer_name:
            return collect_buffer(config, policy, Path(config.save_buffer_name).expanduser())
        collector = Collector(policy, vector_envs(make, config.test_num, config.seed + 10_000))
        return watch(
            algorithm,
            collector,
            task=config.task,
            episodes=config.test_num,
            render=config.render,
            reporter=EvaluationReporter(),
            source=config.resume_path or "an untrained policy",
        )

    train_envs = vector_envs(make, config.training_num, config.seed)
    test_envs = vector_envs(make, config.test_num, config.seed + 10_000)
    replay = VectorReplayBuffer(
        config.buffer_size,
        buffer_num=config.training_num,
        ignore_obs_next=True,
        save_only_last_obs=True,
        stack_num=config.frames_stack,
    )
    train_collector = Collector(policy, train_envs, replay, exploration_noise=True)
    test_collector = Collector(policy, test_envs, exploration_noise=True)
    log_path = new_log_path(config.logdir, config.task, "qrdqn", config.seed)
    writer = SummaryWriter(str(log_path))
    logger = TensorboardLogger(writer)
    reporter = EvaluationReporter(writer=writer)
    saved = plain({"config": asdict(config)})

    def training_fn(epoch: int, env_step: int) -> None:
        fraction = min(env_step / 1_000_000, 1.0)
        policy.set_eps_training(config.eps_train - fraction * (config.eps_train - config.eps_train_final))

    def save_best(algo: Any) -> None:
        save_checkpoint(log_path / "policy.pth", algo, **saved)

    result = algorithm.run_training(
        OffPolicyTrainerParams(
            training_collector=train_collector,
            test_collector=test_collector,
            max_epochs=config.epoch,
            epoch_num_steps=config.step_per_epoch,
            collection_step_num_env_steps=config.step_per_collect,
            test_step_num_episodes=config.test_num,
            batch_size=config.batch_size,
            update_step_num_gradient_steps_per_sample=config.update_per_step,
            training_fn=training_fn,
            save_best_fn=save_best,
            logger=logger,
            compute_score_fn=reporter,
        )
    )
    writer.close()
    print(
        f"done: {config.task} QR-DQN, best return {result.best_reward:.2f}; policy in {log_path / 'policy.pth'}; "
        f"collect a dataset with --watch --resume-path {log_path / 'policy.pth'} --save-buffer-name expert.hdf5"
    )
    return {"log_path": str(log_path), "best_reward": result.best_reward}


def main(argv: Sequence[str] | None = None) -> int:
    run(config_from_args(argv))
    return 0
