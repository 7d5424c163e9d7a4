"""`converters/rl_unplugged_atari.py`: RL Unplugged Atari shards -> buffers `atari_cql.py` trains on.

    python converters/rl_unplugged_atari.py --task Breakout --run-id 1 --shard-id 1
    python converters/rl_unplugged_atari.py --shard-file run_1-00001-of-00100 --output breakout-1.hdf5

Flags follow Tianshou's converter (`--task`, `--run-id`, `--shard-id`, `--dataset-dir`,
`--buffer-dir`); several games, runs, shard ids or files convert in parallel (`--workers` processes
here, or Ray tasks with `--ray-address`). Shards whose buffer already exists are skipped unless
`--overwrite`, so re-running an interrupted batch finishes it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from offline_rl.cli.conversion_settings import (
    conversion_ray_address,
    conversion_workers,
    folder_or_default,
    frame_compression,
    ray_cluster,
    require_one_source,
    worker_count,
)
from offline_rl.cli.flags import parse_config
from offline_rl.core.errors import OfflineRLError
from offline_rl.core.files import check_output
from offline_rl.core.settings import check_ranges, setting
from offline_rl.data.download import check_reachable
from offline_rl.data.rl_unplugged.sources import DOWNLOAD_HINT, default_root, game_name, shard_name, shard_url

if TYPE_CHECKING:
    from offline_rl.data.rl_unplugged.shard_converter import ShardSummary

PROG = "converters/rl_unplugged_atari.py"
DESCRIPTION = "Convert RL Unplugged Atari shards (gzip TFRecord) to replay buffers for examples/atari_cql.py."
FROM_RL_UNPLUGGED = "shards from RL Unplugged (downloaded when missing)"
ON_DISK = "shards already on disk"
ShardAndBuffer = tuple[Path, Path]
"""A shard and the buffer it converts to."""
RUNS, SHARDS_PER_RUN = 5, 100  # DQN-Replay's layout: 5 training runs of each game, 100 shards each


@dataclass
class RLUnpluggedConversionConfig:
    """Which shards (a game's runs and shard ids, or files), where they and their buffers live, and how
    they convert. The folders default under `~/.rl_unplugged` when the command runs, not when this
    module is imported, so a changed HOME (a test's, a cluster job's) is honoured."""

    FLAG_GROUP: ClassVar[str] = "conversion"

    task: list[str] | None = setting(
        None, "game(s): Breakout, Pong, ... (BreakoutNoFrameskip-v4 also works)", group=FROM_RL_UNPLUGGED
    )
    run_id: list[int] = setting([1], "training run(s), 1 to 5", minimum=1, maximum=RUNS, group=FROM_RL_UNPLUGGED)
    shard_id: list[int] = setting(
        [0], "shard ids, 0 to 99", minimum=0, maximum=SHARDS_PER_RUN - 1, group=FROM_RL_UNPLUGGED
    )
    dataset_dir: Path | None = setting(
        None, "where shards are kept (none: ~/.rl_unplugged/datasets)", group=FROM_RL_UNPLUGGED
    )
    buffer_dir: Path | None = setting(
        None, "where buffers are written (none: ~/.rl_unplugged/buffers)", group=FROM_RL_UNPLUGGED
    )
    shard_file: list[Path] | None = setting(None, "shard file(s) to convert", group=ON_DISK)
    output: Path | None = setting(
        None, "buffer file (one shard) or directory (several); none: --buffer-dir", group=ON_DISK
    )
    workers: int | None = conversion_workers("shards")
    ray_address: str | None = conversion_ray_address()
    skip_corrupt: bool = setting(False, "skip damaged records and report how many")
    overwrite: bool = setting(False, "convert again shards whose buffer exists")
    compression: str | None = frame_compression()

    def validate(self) -> None:
        check_ranges(self)
        require_one_source(
            self.task, self.shard_file, self.output, on_disk_flag="--shard-file", picks="--run-id/--shard-id"
        )

    def shards_folder(self) -> Path:
        return folder_or_default(self.dataset_dir, default_root(), "datasets")

    def buffers_folder(self) -> Path:
        return folder_or_default(self.buffer_dir, default_root(), "buffers")


def config_from_args(argv: Sequence[str] | None) -> RLUnpluggedConversionConfig:
    return parse_config(RLUnpluggedConversionConfig(), argv, prog=PROG, description=DESCRIPTION)


def _pairs_for_files(files: Sequence[Path], output: Path | None, buffer_dir: Path) -> list[ShardAndBuffer]:
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
        jobs.append((shard, target))
    return jobs


def _pairs_for_tasks(
    tasks: Sequence[str], run_ids: Sequence[int], shard_ids: Sequence[int], dataset_dir: Path, buffer_dir: Path
) -> list[ShardAndBuffer]:
    jobs = []
    for game in dict.fromkeys(map(game_name, tasks)):
        for run_id in dict.fromkeys(run_ids):
            for shard_id in dict.fromkeys(shard_ids):
                name = shard_name(run_id, shard_id)
                shard = dataset_dir.expanduser() / game / name
                jobs.append((shard, buffer_dir.expanduser() / game / f"{name}.hdf5"))
    return jobs


def _url(shard: Path) -> str:
    """A bucket shard's URL, from where `_pairs_for_tasks` puts it (`<dataset dir>/<Game>/<name>`)."""
    return shard_url(shard.parent.name, shard.name)


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
    config = config_from_args(argv)
    if config.shard_file is not None:
        pairs = _pairs_for_files(config.shard_file, config.output, config.buffers_folder())
    else:
        assert config.task is not None  # validate(): one of the two
        folders = config.shards_folder(), config.buffers_folder()
        pairs = _pairs_for_tasks(config.task, config.run_id, config.shard_id, *folders)
    todo = []
    for shard, output in pairs:
        if output.exists() and not config.overwrite:
            print(f"{output}: already converted, skipped (--overwrite converts it again)")
        else:
            todo.append((shard, output))
    if not todo:
        return 0
    for _, output in todo:  # before any download or conversion
        check_output(output, flag="--output" if config.output is not None else "--buffer-dir")
    bucket = config.shard_file is None  # shards named by --task are downloaded when missing
    if bucket and (missing := [shard for shard, _ in todo if not shard.exists()]):
        check_reachable(_url(missing[0]), missing[0], hint=DOWNLOAD_HINT)  # at once, not once per shard
    # only now: converting needs torch and Tianshou (seconds to import); --help, a mistyped flag, game or
    # file, and no network need neither and answer at once
    from offline_rl.data.rl_unplugged.parallel import (
        ConversionJob,
        ConversionOptions,
        convert_shards,
        convert_shards_on_ray,
    )  # heavy (OpenCV, h5py, Tianshou, torch): loaded only when used

    options = ConversionOptions(skip_corrupt=config.skip_corrupt, compression=config.compression)
    jobs = [ConversionJob(shard, output, options, _url(shard) if bucket else None) for shard, output in todo]
    started = time.perf_counter()
    cluster = ray_cluster(config.ray_address)
    if cluster:
        summaries = convert_shards_on_ray(jobs, cluster)
    else:
        summaries = convert_shards(jobs, workers=worker_count(config.workers, len(jobs)))
    print(total_line(summaries, time.perf_counter() - started))
    return 0
