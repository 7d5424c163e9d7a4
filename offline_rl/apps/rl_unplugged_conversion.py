"""`converters/rl_unplugged_atari.py`: RL Unplugged Atari shards -> buffers `atari_cql.py` trains on.

    python converters/rl_unplugged_atari.py --task Breakout --run-id 1 --shard-id 1
    python converters/rl_unplugged_atari.py --shard-file run_1-00001-of-00100 --output breakout-1.hdf5

Flags follow Tianshou's converter (`--task`, `--run-id`, `--shard-id`, `--dataset-dir`,
`--buffer-dir`); several games, runs, shard ids or files convert in parallel (`--workers` processes
here, or Ray tasks with `--ray-address`). Shards whose buffer already exists are skipped unless
`--overwrite`, so re-running an interrupted batch finishes it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

from offline_rl.apps.flags import FlagParser
from offline_rl.atomic import check_output
from offline_rl.cpu_cores import available_cores
from offline_rl.download import download_file
from offline_rl.errors import OfflineRLError
from offline_rl.rl_unplugged.parallel import ConversionJob, ConversionOptions, convert_shards, convert_shards_on_ray
from offline_rl.rl_unplugged.shard_converter import ShardSummary
from offline_rl.rl_unplugged.sources import default_root, game_name, shard_name, shard_url


def build_parser() -> FlagParser:
    root = default_root()
    parser = FlagParser(
        prog="converters/rl_unplugged_atari.py",
        description="Convert RL Unplugged Atari shards (gzip TFRecord) to replay buffers for examples/atari_cql.py.",
    )
    source = parser.add_argument_group("shards from RL Unplugged (downloaded when missing)")
    source.add_argument(
        "--task", nargs="+", default=None, help="game(s): Breakout, Pong, ... (BreakoutNoFrameskip-v4 also works)"
    )
    source.add_argument("--run-id", type=int, nargs="+", default=[1], help="training run(s), 1 to 5 (default: 1)")
    source.add_argument("--shard-id", type=int, nargs="+", default=[0], help="shard ids, 0 to 99 (default: 0)")
    source.add_argument("--dataset-dir", type=Path, default=root / "datasets", help="where shards are kept")
    source.add_argument("--buffer-dir", type=Path, default=root / "buffers", help="where buffers are written")
    local = parser.add_argument_group("shards already on disk")
    local.add_argument("--shard-file", type=Path, nargs="+", default=None, help="shard file(s) to convert")
    local.add_argument(
        "--output",
        type=Path,
        default=None,
        help="buffer file (one shard) or directory (several); default: --buffer-dir",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="shards converted in parallel (default: one per core, at most one per shard)",
    )
    parser.add_argument(
        "--ray-address",
        default=os.environ.get("RAY_ADDRESS"),
        help="convert as Ray tasks: auto, ray://HOST:PORT, or local (default: $RAY_ADDRESS; without: --workers here)",
    )
    parser.add_argument("--skip-corrupt", action="store_true", help="skip damaged records and report how many")
    parser.add_argument("--overwrite", action="store_true", help="convert again shards whose buffer exists")
    parser.add_argument("--compression", default=None, choices=["gzip", "lzf"], help="compress the buffer's frames")
    return parser


def _jobs_for_files(files: Sequence[Path], output: Path | None, buffer_dir: Path) -> list[ConversionJob]:
    if output is not None and len(files) > 1 and output.exists() and not output.is_dir():
        raise OfflineRLError(f"--output {output}: several shards are converted, so it must be a directory")
    jobs = []
    for file in files:
        shard = file.expanduser()
        if not shard.is_file():
            raise OfflineRLError(f"--shard-file {shard}: no such file")
        if output is None:
            target = buffer_dir.expanduser() / f"{shard.name}.hdf5"
        elif len(files) > 1 or output.is_dir():
            target = output.expanduser() / f"{shard.name}.hdf5"
        else:
            target = output.expanduser()
        jobs.append(ConversionJob(shard, target))
    return jobs


def _jobs_for_tasks(
    tasks: Sequence[str], run_ids: Sequence[int], shard_ids: Sequence[int], dataset_dir: Path, buffer_dir: Path
) -> list[ConversionJob]:
    jobs = []
    for game in dict.fromkeys(map(game_name, tasks)):
        for run_id in dict.fromkeys(run_ids):
            for shard_id in dict.fromkeys(shard_ids):
                name = shard_name(run_id, shard_id)
                shard = dataset_dir.expanduser() / game / name
                jobs.append(ConversionJob(shard, buffer_dir.expanduser() / game / f"{name}.hdf5"))
    return jobs


def _fetch_missing(jobs: Sequence[ConversionJob]) -> None:
    for job in jobs:
        if not job.shard.exists():
            game = job.shard.parent.name
            download_file(shard_url(game, job.shard.name), job.shard, hint="or pass it with --shard-file")


def total_line(summaries: Sequence[ShardSummary], seconds: float) -> str:
    transitions = sum(s.transitions for s in summaries)
    bytes_per = sum(s.bytes_per_transition * s.transitions for s in summaries) / max(transitions, 1)
    return (
        f"converted {len(summaries)} shard(s): {transitions} transitions, "
        f"{sum(s.episodes for s in summaries)} episodes seen, {sum(s.terminals for s in summaries)} terminals, "
        f"{sum(s.skipped for s in summaries)} corrupt records skipped, {bytes_per / 1024:.1f} KB/transition, "
        f"{seconds:.1f} s, {len(summaries) / max(seconds, 1e-9):.2f} shards/s, "
        f"{transitions / max(seconds, 1e-9):.0f} transitions/s"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.task is None) == (args.shard_file is None):
        parser.error("give either --task (with --run-id/--shard-id) or --shard-file")
    if args.workers is not None and args.workers < 1:
        parser.error(f"--workers {args.workers}: expected at least 1")
    if args.shard_file is not None:
        jobs = _jobs_for_files(args.shard_file, args.output, args.buffer_dir)
    else:
        if args.output is not None:
            parser.error("--output goes with --shard-file; with --task, buffers go to --buffer-dir")
        jobs = _jobs_for_tasks(args.task, args.run_id, args.shard_id, args.dataset_dir, args.buffer_dir)
    todo = []
    for job in jobs:
        if job.output.exists() and not args.overwrite:
            print(f"{job.output}: already converted, skipped (--overwrite converts it again)")
        else:
            todo.append(job)
    if not todo:
        return 0
    for job in todo:  # before any download or conversion
        check_output(job.output, flag="--output" if args.output is not None else "--buffer-dir")
    _fetch_missing(todo)
    workers = args.workers or min(len(todo), available_cores())
    options = ConversionOptions(skip_corrupt=args.skip_corrupt, compression=args.compression)
    started = time.perf_counter()
    if args.ray_address:
        summaries = convert_shards_on_ray(todo, options, args.ray_address)
    else:
        summaries = convert_shards(todo, options, workers=workers)
    seconds = time.perf_counter() - started
    for summary in summaries:
        print(summary.line())
    print(total_line(summaries, seconds))
    return 0
