"""`python -m offline_rl.collect`: write a D4RL-format dataset by rolling out a behaviour policy."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from offline_rl.cli import FlagParser, run_main
from offline_rl.data.collect import RANDOM_POLICY, CollectConfig, collect_dataset
from offline_rl.data.d4rl import read_d4rl_file
from offline_rl.data.minari import load_minari
from offline_rl.data.stats import dataset_stats


def build_parser() -> FlagParser:
    parser = FlagParser(prog="python -m offline_rl.collect", description=__doc__)
    parser.add_argument("--task", required=True, help="gymnasium id, e.g. HalfCheetah-v4")
    parser.add_argument("--output", required=True, type=Path, help="HDF5 file to write")
    parser.add_argument("--size", type=int, default=1_000_000, help="number of transitions")
    parser.add_argument("--policy", default=RANDOM_POLICY, help="'random' or a policy file (offline_rl.policy_file)")
    parser.add_argument(
        "--noise-std", type=float, default=0.0, help="Gaussian action noise, fraction of the half-range"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-envs", type=int, default=1, help="environments stepped together")
    parser.add_argument("--compression", default=None, choices=[None, "gzip", "lzf"])
    parser.add_argument(
        "--format",
        dest="output_format",
        default="d4rl",
        choices=["d4rl", "minari"],
        help="d4rl: one HDF5 file; minari: a Minari dataset directory",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config = CollectConfig(
        task=args.task,
        output=args.output,
        size=args.size,
        policy=args.policy,
        noise_std=args.noise_std,
        seed=args.seed,
        num_envs=args.num_envs,
        compression=args.compression,
        overwrite=args.overwrite,
        output_format=args.output_format,
    )
    path = collect_dataset(config)
    buffer = load_minari(path) if args.output_format == "minari" else read_d4rl_file(path)
    stats = dataset_stats(buffer)
    print(stats.summary())
    print(
        f"wrote {path}: {stats.transitions} transitions, {stats.episodes} episodes, mean return {stats.return_mean:.2f}"
    )
    return 0


if __name__ == "__main__":
    run_main(main)
