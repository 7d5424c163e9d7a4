"""The CQL-SAC experiment behind `examples/d4rl_cql.py`: flags, data, training, evaluation, checkpoints.

Layout of a run (as Tianshou's examples): `<logdir>/<task>/cql/<seed>/<timestamp>/` holds the
TensorBoard events, `policy.pth` (best evaluation) and `checkpoint.pth` (last epoch). Both are full
checkpoints (`offline_rl.checkpoint`); `--resume-path` continues from one, `--watch` only
evaluates it. The actor is also exported as `behaviour_policy.pt` (`offline_rl.policy_file`), so
`python -m offline_rl.collect --policy` can roll it out to make medium/expert-style datasets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym

from offline_rl.checkpoint import load_checkpoint, restore_algorithm, saved_algorithm_config
from offline_rl.cli import FlagParser, add_bool_flag, pick_device
from offline_rl.cql_sac.algorithm import CQLSAC
from offline_rl.cql_sac.config import CQLSACConfig
from offline_rl.cql_sac.export import export_policy
from offline_rl.data import dataset_info, dataset_stats, load_dataset
from offline_rl.data.collect import ensure_random_dataset
from offline_rl.envs import check_dataset_fits_env, make_env
from offline_rl.errors import OfflineRLError
from offline_rl.evaluation import EvaluationReporter
from offline_rl.scores import reference_scores
from offline_rl.training import RunSettings, configure_torch, evaluate_or_train


@dataclass
class ExperimentConfig:
    """What to train on and how long; the algorithm's own settings are in `algorithm`."""

    task: str = "HalfCheetah-v4"
    dataset: str | None = None
    dataset_size: int = 100_000
    seed: int = 0
    epoch: int = 200
    step_per_epoch: int = 5000
    batch_size: int = 256
    test_num: int = 10
    logdir: str = "log"
    log_interval: int = 1
    device: str = "auto"
    threads: int = 0
    matmul_precision: str = "highest"
    resume_path: str | None = None
    watch: bool = False
    render: float = 0.0
    algorithm: CQLSACConfig = field(default_factory=CQLSACConfig)


def build_parser() -> FlagParser:
    defaults, algo = ExperimentConfig(), CQLSACConfig()
    parser = FlagParser(
        prog="examples/d4rl_cql.py",
        description="Train CQL-SAC offline on a D4RL/Minari/Tianshou dataset and evaluate it in gymnasium.",
    )
    parser.add_argument("--task", default=defaults.task, help="gymnasium id with a Box action space")
    parser.add_argument(
        "--dataset",
        default=None,
        help="D4RL name or HDF5 file, Minari id or directory, or Tianshou buffer; "
        "default: a random-policy dataset generated for --task and cached",
    )
    parser.add_argument(
        "--dataset-size", type=int, default=defaults.dataset_size, help="transitions in the generated default dataset"
    )
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--epoch", type=int, default=defaults.epoch)
    parser.add_argument("--step-per-epoch", type=int, default=defaults.step_per_epoch, help="updates per epoch")
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument(
        "--hidden-sizes",
        type=int,
        nargs="*",
        default=algo.actor_hidden_sizes,
        help="actor hidden layers (critics are as wide as the widest)",
    )
    parser.add_argument(
        "--critic-layers",
        type=int,
        default=len(algo.critic_hidden_sizes),
        help="number of hidden layers of each critic",
    )
    parser.add_argument("--num-critics", type=int, default=algo.num_critics)
    parser.add_argument("--actor-lr", type=float, default=algo.actor_lr)
    parser.add_argument("--critic-lr", type=float, default=algo.critic_lr)
    parser.add_argument("--alpha", type=float, default=algo.alpha, help="entropy temperature (initial if tuned)")
    add_bool_flag(parser, "--auto-alpha", algo.auto_alpha, "tune α towards the target entropy -|A|")
    parser.add_argument("--alpha-lr", type=float, default=algo.alpha_lr)
    parser.add_argument(
        "--cql-weight",
        "--min-q-weight",
        dest="cql_weight",
        type=float,
        default=algo.cql_weight,
        help="weight of the conservative term",
    )
    parser.add_argument("--cql-n-actions", type=int, default=algo.cql_n_actions, help="N, samples per action group")
    parser.add_argument(
        "--temperature",
        type=float,
        default=algo.temperature,
        help="T of T·logsumexp(Q/T) (TF-Agents' softmax_temperature is 1/T)",
    )
    add_bool_flag(parser, "--importance-sample", algo.importance_sample, "density-corrected CQL(H); off: CQL(ρ)")
    add_bool_flag(parser, "--with-lagrange", algo.with_lagrange, "tune α′ so the gap meets --target-action-gap")
    parser.add_argument("--target-action-gap", type=float, default=algo.target_action_gap)
    parser.add_argument("--cql-alpha-lr", type=float, default=algo.cql_alpha_lr)
    add_bool_flag(parser, "--max-target-backup", algo.max_target_backup, "max over N target samples")
    add_bool_flag(parser, "--backup-entropy", algo.backup_entropy, "subtract α·log π in the TD target")
    parser.add_argument("--clip-diff-min", type=float, default=algo.clip_diff_min)
    parser.add_argument("--clip-diff-max", type=float, default=algo.clip_diff_max)
    parser.add_argument("--bc-steps", type=int, default=algo.bc_steps, help="behaviour-cloning warm-up updates")
    add_bool_flag(parser, "--norm-obs", algo.normalize_obs, "normalise observations with dataset statistics")
    add_bool_flag(parser, "--orthogonal-init", algo.orthogonal_init, "orthogonal init of actor and critics")
    add_bool_flag(parser, "--bc-debug-mode", algo.bc_debug_mode, "critic loss = conservative term only")
    add_bool_flag(parser, "--clip-dataset-actions", algo.clip_dataset_actions, "clip dataset actions into the box")
    parser.add_argument("--reward-scale", type=float, default=algo.reward_scale)
    parser.add_argument("--reward-bias", type=float, default=algo.reward_bias)
    parser.add_argument("--tau", type=float, default=algo.tau)
    parser.add_argument("--gamma", type=float, default=algo.gamma)
    parser.add_argument("--test-num", type=int, default=defaults.test_num, help="evaluation episodes")
    parser.add_argument("--logdir", default=defaults.logdir)
    parser.add_argument(
        "--log-interval",
        type=int,
        default=defaults.log_interval,
        help="log training statistics every this many updates",
    )
    parser.add_argument("--device", default=defaults.device, help="auto (CUDA when present), cpu, cuda, cuda:N")
    parser.add_argument("--threads", type=int, default=defaults.threads, help="torch CPU threads (0: torch's default)")
    parser.add_argument(
        "--matmul-precision",
        default=defaults.matmul_precision,
        choices=["highest", "high", "medium"],
        help="torch.set_float32_matmul_precision; 'medium' lets CPUs with bf16 units (and GPUs) use "
        "faster internal arithmetic for float32 matrix products",
    )
    parser.add_argument("--resume-path", default=None, help="checkpoint.pth or policy.pth to continue from")
    parser.add_argument("--watch", action="store_true", help="only evaluate --resume-path")
    parser.add_argument("--render", type=float, default=defaults.render, help="seconds between rendered frames")
    return parser


def config_from_args(argv: Sequence[str] | None) -> ExperimentConfig:
    args = build_parser().parse_args(argv)
    positive = {
        "--epoch": args.epoch,
        "--step-per-epoch": args.step_per_epoch,
        "--batch-size": args.batch_size,
        "--test-num": args.test_num,
        "--dataset-size": args.dataset_size,
        "--critic-layers": args.critic_layers,
        "--log-interval": args.log_interval,
        "--num-critics": args.num_critics,
    }
    for flag, value in positive.items():
        if value <= 0:
            raise OfflineRLError(f"{flag} {value}: expected a positive integer")
    if not args.hidden_sizes:
        raise OfflineRLError("--hidden-sizes: expected at least one layer width")
    width = max(args.hidden_sizes)
    algorithm = CQLSACConfig(
        actor_hidden_sizes=list(args.hidden_sizes),
        critic_hidden_sizes=[width] * args.critic_layers,
        num_critics=args.num_critics,
        orthogonal_init=args.orthogonal_init,
        normalize_obs=args.norm_obs,
        actor_lr=args.actor_lr,
        critic_lr=args.critic_lr,
        gamma=args.gamma,
        tau=args.tau,
        alpha=args.alpha,
        auto_alpha=args.auto_alpha,
        alpha_lr=args.alpha_lr,
        cql_weight=args.cql_weight,
        cql_n_actions=args.cql_n_actions,
        temperature=args.temperature,
        importance_sample=args.importance_sample,
        with_lagrange=args.with_lagrange,
        target_action_gap=args.target_action_gap,
        cql_alpha_lr=args.cql_alpha_lr,
        clip_diff_min=args.clip_diff_min,
        clip_diff_max=args.clip_diff_max,
        max_target_backup=args.max_target_backup,
        backup_entropy=args.backup_entropy,
        reward_scale=args.reward_scale,
        reward_bias=args.reward_bias,
        bc_steps=args.bc_steps,
        bc_debug_mode=args.bc_debug_mode,
        clip_dataset_actions=args.clip_dataset_actions,
    )
    algorithm.validate()
    if args.watch and not args.resume_path:
        raise OfflineRLError("--watch needs --resume-path (a policy.pth or checkpoint.pth)")
    return ExperimentConfig(
        task=args.task,
        dataset=args.dataset,
        dataset_size=args.dataset_size,
        seed=args.seed,
        epoch=args.epoch,
        step_per_epoch=args.step_per_epoch,
        batch_size=args.batch_size,
        test_num=args.test_num,
        logdir=args.logdir,
        log_interval=args.log_interval,
        device=args.device,
        threads=args.threads,
        matmul_precision=args.matmul_precision,
        resume_path=args.resume_path,
        watch=args.watch,
        render=args.render,
        algorithm=algorithm,
    )


def _scores_for(task: str, info: dict[str, Any]) -> tuple[float | None, float | None]:
    if info.get("ref_min_score") is not None and info.get("ref_max_score") is not None:
        return float(info["ref_min_score"]), float(info["ref_max_score"])
    scores = reference_scores(task)
    return (scores[0], scores[1]) if scores else (None, None)


def run(config: ExperimentConfig) -> dict[str, Any]:
    """Train (or, with `watch`, only evaluate) and return the final summary as a dict."""
    device = pick_device(config.device)
    configure_torch(device, config.threads, config.matmul_precision, config.seed)
    env = make_env(config.task)
    if not isinstance(env.action_space, gym.spaces.Box):
        raise OfflineRLError(
            f"--task {config.task}: CQL-SAC needs a continuous (Box) action space, got {env.action_space}"
        )
    checkpoint = load_checkpoint(config.resume_path, device) if config.resume_path else None
    algorithm_config = saved_algorithm_config(checkpoint, CQLSACConfig, config.algorithm, config.resume_path)
    algorithm = CQLSAC.build(env.observation_space, env.action_space, algorithm_config, device=device)
    if checkpoint is not None:
        restore_algorithm(algorithm, checkpoint, str(config.resume_path))
    info: dict[str, Any] = dict(checkpoint.get("dataset_info", {})) if checkpoint else {}
    buffer = None
    if not config.watch:
        source = config.dataset or str(ensure_random_dataset(config.task, config.dataset_size, seed=0))
        buffer = load_dataset(source, download=True)
        check_dataset_fits_env(buffer, config.task, source=source)
        info = dataset_info(buffer)
        stats = dataset_stats(buffer)
        print(
            f"dataset {info.get('name', source)}: {stats.transitions} transitions, {stats.episodes} episodes, "
            f"return {stats.return_mean:.1f} (min {stats.return_min:.1f}, max {stats.return_max:.1f}), "
            f"{stats.terminated} terminated / {stats.truncated} truncated"
        )
    ref_min, ref_max = _scores_for(config.task, info)
    settings = RunSettings(
        task=config.task,
        algo_name="cql",
        seed=config.seed,
        logdir=config.logdir,
        epoch=config.epoch,
        step_per_epoch=config.step_per_epoch,
        batch_size=config.batch_size,
        test_num=config.test_num,
        log_interval=config.log_interval,
        render=config.render,
    )
    return evaluate_or_train(
        algorithm,
        buffer,
        lambda **kwargs: make_env(config.task, **kwargs),
        settings,
        lambda writer: EvaluationReporter(ref_min, ref_max, writer=writer),
        watch_only=config.watch,
        resume_path=config.resume_path,
        saved={"config": asdict(config), "dataset_info": info},
        on_best=lambda algo, log_path: export_policy(algo, log_path / "behaviour_policy.pt"),
        dataset_name=info.get("name"),
    )


def main(argv: Sequence[str] | None = None) -> int:
    run(config_from_args(argv))
    return 0


__all__ = ["ExperimentConfig", "build_parser", "config_from_args", "main", "run"]
