"""The experiment behind `examples/atari_cql.py`: discrete CQL on a QR-DQN head, trained offline on an
Atari buffer and evaluated on whole games with unclipped rewards.

Flags mirror Tianshou's classic `atari_cql.py` (kebab-case, snake_case accepted); logging,
checkpoints, `--resume-path`, `--watch` and the summary line behave as in `examples/d4rl_cql.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from offline_rl.checkpoint import load_checkpoint, restore_algorithm, saved_algorithm_config
from offline_rl.cli import FlagParser, add_bool_flag, pick_device
from offline_rl.data import dataset_info, load_buffers
from offline_rl.data.frame_pool import FramePoolBuffer
from offline_rl.discrete_cql.algorithm import DiscreteCQL
from offline_rl.discrete_cql.config import DiscreteCQLConfig
from offline_rl.envs import make_atari_env
from offline_rl.errors import OfflineRLError
from offline_rl.evaluation import EvaluationReporter
from offline_rl.training import RunSettings, configure_torch, evaluate_or_train


@dataclass
class AtariCQLConfig:
    task: str = "PongNoFrameskip-v4"
    seed: int = 0
    eps_test: float = 0.001
    frames_stack: int = 4
    scale_obs: bool = True
    epoch: int = 100
    update_per_epoch: int = 10_000
    batch_size: int = 32
    test_num: int = 10
    logdir: str = "log"
    log_interval: int = 1
    render: float = 0.0
    device: str = "auto"
    threads: int = 0
    matmul_precision: str = "highest"
    resume_path: str | None = None
    watch: bool = False
    load_buffer_name: tuple[str, ...] = ("expert.hdf5",)
    buffer_from_rl_unplugged: bool = False
    algorithm: DiscreteCQLConfig = field(default_factory=DiscreteCQLConfig)


def create_buffer_command(task: str, path: str, from_rl_unplugged: bool = False) -> str:
    if from_rl_unplugged:
        game = task.removeprefix("ALE/").split("-")[0].removesuffix("NoFrameskip")
        return f"python converters/rl_unplugged_atari.py --task {game} --run-id 1 --shard-id 0"
    return (
        f"python examples/atari_qrdqn.py --task {task} --watch --eps-test 0.2 --buffer-size 1000000 "
        f"--save-buffer-name {path}"
    )


def build_parser() -> FlagParser:
    d, a = AtariCQLConfig(), DiscreteCQLConfig()
    parser = FlagParser(prog="examples/atari_cql.py", description="Discrete CQL (QR-DQN head) on an Atari buffer.")
    parser.add_argument("--task", default=d.task, help="PongNoFrameskip-v4, ALE/Breakout-v5, ...")
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--eps-test", type=float, default=d.eps_test, help="ε-greedy ε during evaluation")
    parser.add_argument("--lr", type=float, default=a.lr)
    parser.add_argument("--adam-eps", type=float, default=a.adam_eps)
    parser.add_argument("--gamma", type=float, default=a.gamma)
    parser.add_argument("--num-quantiles", type=int, default=a.num_quantiles)
    parser.add_argument("--n-step", type=int, default=a.n_step)
    parser.add_argument("--target-update-freq", type=int, default=a.target_update_freq)
    parser.add_argument("--min-q-weight", type=float, default=a.min_q_weight)
    add_bool_flag(parser, "--double-q", a.double_q, "pick a* with the online network")
    parser.add_argument("--epoch", type=int, default=d.epoch)
    parser.add_argument("--update-per-epoch", type=int, default=d.update_per_epoch)
    parser.add_argument("--batch-size", type=int, default=d.batch_size)
    parser.add_argument("--test-num", type=int, default=d.test_num)
    parser.add_argument("--frames-stack", type=int, default=d.frames_stack)
    add_bool_flag(parser, "--scale-obs", d.scale_obs, "divide uint8 frames by 255 inside the network")
    parser.add_argument("--logdir", default=d.logdir)
    parser.add_argument("--log-interval", type=int, default=d.log_interval)
    parser.add_argument("--render", type=float, default=d.render)
    parser.add_argument("--device", default=d.device, help="auto (CUDA when present), cpu, cuda, cuda:N")
    parser.add_argument("--threads", type=int, default=d.threads)
    parser.add_argument("--matmul-precision", default=d.matmul_precision, choices=["highest", "high", "medium"])
    parser.add_argument("--resume-path", default=None)
    parser.add_argument("--watch", action="store_true", help="only evaluate --resume-path")
    parser.add_argument(
        "--load-buffer-name",
        nargs="+",
        default=list(d.load_buffer_name),
        help="the offline buffer (.hdf5); several RL Unplugged shards (or atari_qrdqn.py collections) are combined",
    )
    parser.add_argument(
        "--buffer-from-rl-unplugged",
        action="store_true",
        help="the buffer was made by converters/rl_unplugged_atari.py",
    )
    return parser


def config_from_args(argv: Sequence[str] | None) -> AtariCQLConfig:
    args = build_parser().parse_args(argv)
    for flag, value in {
        "--epoch": args.epoch,
        "--update-per-epoch": args.update_per_epoch,
        "--batch-size": args.batch_size,
        "--test-num": args.test_num,
        "--frames-stack": args.frames_stack,
        "--log-interval": args.log_interval,
    }.items():
        if value <= 0:
            raise OfflineRLError(f"{flag} {value}: expected a positive integer")
    if not 0 <= args.eps_test <= 1:
        raise OfflineRLError(f"--eps-test {args.eps_test}: expected a probability in [0, 1]")
    if args.watch and not args.resume_path:
        raise OfflineRLError("--watch needs --resume-path (a policy.pth or checkpoint.pth)")
    algorithm = DiscreteCQLConfig(
        num_quantiles=args.num_quantiles,
        gamma=args.gamma,
        n_step=args.n_step,
        target_update_freq=args.target_update_freq,
        min_q_weight=args.min_q_weight,
        lr=args.lr,
        adam_eps=args.adam_eps,
        double_q=args.double_q,
    )
    algorithm.validate()
    return AtariCQLConfig(
        task=args.task,
        seed=args.seed,
        eps_test=args.eps_test,
        frames_stack=args.frames_stack,
        scale_obs=args.scale_obs,
        epoch=args.epoch,
        update_per_epoch=args.update_per_epoch,
        batch_size=args.batch_size,
        test_num=args.test_num,
        logdir=args.logdir,
        log_interval=args.log_interval,
        render=args.render,
        device=args.device,
        threads=args.threads,
        matmul_precision=args.matmul_precision,
        resume_path=args.resume_path,
        watch=args.watch,
        load_buffer_name=tuple(args.load_buffer_name),
        buffer_from_rl_unplugged=args.buffer_from_rl_unplugged,
        algorithm=algorithm,
    )


def load_atari_buffer(config: AtariCQLConfig, env: gym.Env) -> Any:
    """The offline buffer, checked against the task; a one-line error with the fix if it does not fit."""
    paths = [Path(name).expanduser() for name in config.load_buffer_name]
    how = create_buffer_command(config.task, config.load_buffer_name[0], config.buffer_from_rl_unplugged)
    for path in paths:
        if not path.is_file():
            raise OfflineRLError(f"--load-buffer-name {path}: no such file; create one with: {how}")
    buffer = load_buffers(paths)
    where = " ".join(map(str, paths))
    if config.buffer_from_rl_unplugged and not isinstance(buffer, FramePoolBuffer):
        raise OfflineRLError(
            f"--buffer-from-rl-unplugged: {where} is not a buffer written by the RL Unplugged converter"
        )
    obs_shape = tuple(np.asarray(buffer[np.array([0])].obs).shape[1:])
    expected = tuple(env.observation_space.shape or ())
    if obs_shape != expected:
        raise OfflineRLError(
            f"--load-buffer-name {where}: observations have shape {obs_shape}, but {config.task} with "
            f"--frames-stack {config.frames_stack} observes {expected}; create a matching one with: {how}"
        )
    num_actions = int(env.action_space.n)  # type: ignore[attr-defined]
    top = int(np.max(buffer.act[: len(buffer)]))
    if top >= num_actions:
        raise OfflineRLError(
            f"--load-buffer-name {where}: holds action {top}, but {config.task} has {num_actions} actions; "
            f"create a matching one with: {how}"
        )
    return buffer


def run(config: AtariCQLConfig) -> dict[str, Any]:
    device = pick_device(config.device)
    configure_torch(device, config.threads, config.matmul_precision, config.seed)
    env = make_atari_env(config.task, config.frames_stack)
    checkpoint = load_checkpoint(config.resume_path, device) if config.resume_path else None
    algorithm_config = saved_algorithm_config(checkpoint, DiscreteCQLConfig, config.algorithm, config.resume_path)
    algorithm = DiscreteCQL.build(
        env.observation_space,
        env.action_space,
        algorithm_config,
        device=device,
        eps_test=config.eps_test,
        scale_obs=config.scale_obs,
    )
    if checkpoint is not None:
        restore_algorithm(algorithm, checkpoint, str(config.resume_path))
    buffer = None if config.watch else load_atari_buffer(config, env)
    settings = RunSettings(
        task=config.task,
        algo_name="cql",
        seed=config.seed,
        logdir=config.logdir,
        epoch=config.epoch,
        step_per_epoch=config.update_per_epoch,
        batch_size=config.batch_size,
        test_num=config.test_num,
        log_interval=config.log_interval,
        render=config.render,
    )
    names = " ".join(config.load_buffer_name)
    info = (dataset_info(buffer) if buffer is not None else {}) or {"name": names}
    if buffer is not None:
        # Whole Atari games with an untrained policy can run to the 27k-step cap: say what is happening.
        held = getattr(buffer, "nbytes", 0) / 2**30
        print(
            f"{names}: {len(buffer)} transitions ({held:.2f} GiB in RAM); each evaluation plays "
            f"{config.test_num} whole game(s) of {config.task} (up to 27 000 steps each)",
            flush=True,
        )
    return evaluate_or_train(
        algorithm,
        buffer,
        lambda **kwargs: make_atari_env(config.task, config.frames_stack, **kwargs),
        settings,
        lambda writer: EvaluationReporter(writer=writer),
        watch_only=config.watch,
        resume_path=config.resume_path,
        saved={"config": asdict(config), "dataset_info": info},
        dataset_name=str(info.get("name", names)),
    )


def main(argv: Sequence[str] | None = None) -> int:
    run(config_from_args(argv))
    return 0
