"""`converters/dqn_replay_atari.py`: DQN Replay checkpoints -> buffers `atari_cql.py` trains on.

    python converters/dqn_replay_atari.py --task Pong --run-id 1 --checkpoint 0 1 2
    python converters/dqn_replay_atari.py --task Pong --fraction 0.01        # the CQL paper's 1%
    python converters/dqn_replay_atari.py --replay-dir Pong/1/replay_logs --output pong-1.hdf5 --checkpoint 50

Each checkpoint becomes one buffer file; `atari_cql.py --load-buffer-name` takes several at once.
Several checkpoints convert in parallel (`--workers` processes here, or Ray tasks with
`--ray-address`). Missing files are downloaded in checkpoint order while the checkpoints already
downloaded convert. Checkpoints whose buffer already exists are skipped unless `--overwrite`, so
re-running an interrupted batch finishes it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
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
from offline_rl.core.jobs import run_jobs, run_jobs_on_ray
from offline_rl.core.settings import check_ranges, setting
from offline_rl.data.download import check_reachable, download_file
from offline_rl.data.dqn_replay.sources import (
    CHECKPOINTS,
    RUNS,
    array_file,
    checkpoint_files,
    checkpoints_in,
    default_root,
    file_url,
    folder_url,
    game_name,
    replay_folder,
)
from offline_rl.data.names import number_ranges

if TYPE_CHECKING:
    from offline_rl.core.jobs import Progress
    from offline_rl.data.dqn_replay.converter import CheckpointSummary

PROG = "converters/dqn_replay_atari.py"
DESCRIPTION = "Convert DQN Replay checkpoints (Dopamine replays, the CQL paper's Atari data) to atari_cql.py buffers."
FROM_BUCKET = "checkpoints from the DQN Replay bucket (downloaded when missing)"
ON_DISK = "a replay folder already on disk"
DOWNLOAD_HINT = "or point --replay-dir at a copy"


@dataclass(frozen=True)
class CheckpointOptions:
    fraction: float = 1.0
    compression: str | None = None


@dataclass(frozen=True)
class CheckpointJob:
    replay_dir: Path
    checkpoint: int
    output: Path
    options: CheckpointOptions = CheckpointOptions()
    mirror_folder: str | None = None
    """The folder on the mirror that missing files are downloaded from (none: all must be on disk). Read
    from `$DQN_REPLAY_MIRROR` where the command runs, for a Ray task's environment may not have it."""
    frames_url: str | None = None
    """Where the frame file is read from as it downloads (set by `fetch_missing` for a fraction)."""


@dataclass
class DQNReplayConversionConfig:
    """Which checkpoints (a game's runs, or a folder), where they and their buffers live, and how much of
    each is kept. The folders default under `~/.dqn_replay` when the command runs."""

    FLAG_GROUP: ClassVar[str] = "conversion"

    task: list[str] | None = setting(
        None, "game(s): Pong, Breakout, ... (PongNoFrameskip-v4 also works)", group=FROM_BUCKET
    )
    run_id: list[int] = setting([1], "training run(s), 1 to 5", minimum=1, maximum=RUNS[-1], group=FROM_BUCKET)
    checkpoint: list[int] | None = setting(
        None,
        "checkpoint(s), 0 to 50, each 1M transitions in the order DQN played them (none: all 51; with "
        "--replay-dir: every complete one there)",
        minimum=CHECKPOINTS[0],
        maximum=CHECKPOINTS[-1],
    )
    fraction: float = setting(
        1.0,
        "keep each checkpoint's first FRACTION of slots (0.01: the CQL paper's 1% of the data)",
        details=(
            "The CQL paper's Atari code (batch_rl's FixedReplayBuffer) reads the first 10 000 slots of each checkpoint."
        ),
        above=0.0,
        maximum=1.0,
    )
    dataset_dir: Path | None = setting(
        None, "where checkpoints are kept (none: ~/.dqn_replay/datasets)", group=FROM_BUCKET
    )
    buffer_dir: Path | None = setting(
        None, "where buffers are written (none: ~/.dqn_replay/buffers)", group=FROM_BUCKET
    )
    replay_dir: Path | None = setting(None, "a Dopamine replay folder (replay_logs) to convert", group=ON_DISK)
    output: Path | None = setting(
        None, "buffer file (one checkpoint) or directory (several); none: in --buffer-dir", group=ON_DISK
    )
    workers: int | None = conversion_workers("checkpoints")
    ray_address: str | None = conversion_ray_address()
    overwrite: bool = setting(False, "convert again checkpoints whose buffer exists")
    compression: str | None = frame_compression()

    def validate(self) -> None:
        check_ranges(self)
        require_one_source(
            self.task, self.replay_dir, self.output, on_disk_flag="--replay-dir", picks="--run-id/--checkpoint"
        )

    def datasets_folder(self) -> Path:
        return folder_or_default(self.dataset_dir, default_root(), "datasets")

    def buffers_folder(self) -> Path:
        return folder_or_default(self.buffer_dir, default_root(), "buffers")

    def buffer_name(self, checkpoint: int) -> str:
        """`ckpt_7.hdf5`, or with --fraction `ckpt_7-first_0.01.hdf5`: a part never passes for the whole."""
        part = "" if self.fraction >= 1.0 else f"-first_{self.fraction:g}"
        return f"ckpt_{checkpoint}{part}.hdf5"

    def options(self) -> CheckpointOptions:
        return CheckpointOptions(fraction=self.fraction, compression=self.compression)


def config_from_args(argv: Sequence[str] | None) -> DQNReplayConversionConfig:
    return parse_config(DQNReplayConversionConfig(), argv, prog=PROG, description=DESCRIPTION)


def jobs_for_folder(config: DQNReplayConversionConfig) -> list[CheckpointJob]:
    assert config.replay_dir is not None
    folder = config.replay_dir.expanduser()
    if not folder.is_dir():
        raise OfflineRLError(f"--replay-dir {folder}: no such folder")
    complete = checkpoints_in(folder)
    checkpoints = list(dict.fromkeys(config.checkpoint)) if config.checkpoint is not None else complete
    if not complete:
        raise OfflineRLError(
            f"--replay-dir {folder}: holds no complete checkpoint (each needs "
            f"{', '.join(checkpoint_files(0)).replace('.0.', '.N.')})"
        )
    for checkpoint in checkpoints:
        if checkpoint not in complete:
            raise OfflineRLError(absent_checkpoint(folder, checkpoint, complete))
    output = config.output.expanduser() if config.output is not None else None
    if output is not None and len(checkpoints) > 1 and output.exists() and not output.is_dir():
        raise OfflineRLError(f"--output {output}: several checkpoints are converted, so it must be a directory")
    jobs = []
    for checkpoint in checkpoints:
        if output is None:
            target = config.buffers_folder() / config.buffer_name(checkpoint)
        elif len(checkpoints) > 1 or output.is_dir():
            target = output / config.buffer_name(checkpoint)
        else:
            target = output
        jobs.append(CheckpointJob(folder, checkpoint, target, config.options()))
    return jobs


def absent_checkpoint(folder: Path, checkpoint: int, complete: list[int]) -> str:
    """Why `--checkpoint` cannot be converted from `folder`, and which checkpoints can: said before
    any conversion starts, not after the checkpoints before it in the list are done."""
    missing = [name for name in checkpoint_files(checkpoint) if not (folder / name).is_file()]
    held = f"its complete checkpoints are {number_ranges([str(number) for number in complete])}"
    if len(missing) < len(checkpoint_files(checkpoint)):
        return f"--checkpoint {checkpoint}: incomplete in {folder} ({missing[0]} is missing); {held}"
    return f"--checkpoint {checkpoint}: not in {folder}; {held}"


def jobs_for_tasks(config: DQNReplayConversionConfig) -> list[CheckpointJob]:
    assert config.task is not None
    checkpoints = list(dict.fromkeys(config.checkpoint if config.checkpoint is not None else CHECKPOINTS))
    jobs = []
    for game in dict.fromkeys(map(game_name, config.task)):
        for run in dict.fromkeys(config.run_id):
            folder = replay_folder(config.datasets_folder(), game, run)
            for checkpoint in checkpoints:
                output = config.buffers_folder() / game / str(run) / config.buffer_name(checkpoint)
                jobs.append(CheckpointJob(folder, checkpoint, output, config.options(), folder_url(game, run)))
    return jobs


def missing_files(job: CheckpointJob) -> list[tuple[str, Path]]:
    """The URL and the path of each file of a bucket checkpoint that is not on disk yet."""
    if job.mirror_folder is None:
        return []
    paths = [job.replay_dir / name for name in checkpoint_files(job.checkpoint)]
    return [(file_url(job.mirror_folder, path.name), path) for path in paths if not path.exists()]


def fetch_missing(job: CheckpointJob, progress: Progress) -> CheckpointJob:
    """Download the files of a bucket checkpoint that are not on disk yet (each atomically), counting
    the bytes on the download bar. When only a fraction is kept, the frame file (99% of the bytes) is
    not downloaded: the job gets its URL, for the converter to read its first slots as they arrive."""
    frames_url = None
    for url, path in missing_files(job):
        if job.options.fraction < 1.0 and path.name == array_file("observation", job.checkpoint):
            frames_url = url
        else:
            download_file(url, path, hint=DOWNLOAD_HINT, meter=progress.download)
    return replace(job, frames_url=frames_url)


def convert_job(job: CheckpointJob, progress: Progress) -> CheckpointSummary:
    """One checkpoint, in this process, a worker process or a Ray task; the bar counts frames copied."""
    from offline_rl.data.dqn_replay.converter import (
        convert_checkpoint,  # heavy (h5py, Tianshou, torch): loaded only when used
    )

    return convert_checkpoint(
        job.replay_dir,
        job.checkpoint,
        job.output,
        fraction=job.options.fraction,
        compression=job.options.compression,
        frames_url=job.frames_url,
        on_total=progress.grow,
        on_frames=progress.advance,
    )


def total_line(summaries: Sequence[CheckpointSummary], seconds: float) -> str:
    transitions = sum(s.transitions for s in summaries)
    return (
        f"converted {len(summaries)} checkpoint(s): {transitions} transitions, "
        f"{sum(s.terminals for s in summaries)} terminals, {seconds:.1f} s, "
        f"{transitions / max(seconds, 1e-9):.0f} transitions/s"
    )


def main(argv: Sequence[str] | None = None) -> int:
    config = config_from_args(argv)
    jobs = jobs_for_folder(config) if config.replay_dir is not None else jobs_for_tasks(config)
    todo = []
    for job in jobs:
        if job.output.exists() and not config.overwrite:
            print(f"{job.output}: already converted, skipped (--overwrite converts it again)")
        else:
            todo.append(job)
    if not todo:
        return 0
    for job in todo:  # before any download or conversion
        check_output(job.output, flag="--output" if config.output is not None else "--buffer-dir")
    downloads = [file for job in todo for file in missing_files(job)]
    if downloads:
        check_reachable(*downloads[0], hint=DOWNLOAD_HINT)  # at once, not once per checkpoint after its timeout
    fetch = fetch_missing if downloads else None
    # only now: converting needs h5py and Tianshou (seconds to import); --help and a mistyped flag need neither
    import offline_rl.data.dqn_replay.converter  # noqa: F401  (imported once here; forked workers inherit it)

    label = f"convert ckpt {todo[0].checkpoint}" if len(todo) == 1 else f"convert {len(todo)} checkpoints"
    started = time.perf_counter()
    cluster = ray_cluster(config.ray_address)
    if cluster:
        summaries = run_jobs_on_ray(convert_job, todo, cluster, fetch=fetch, desc=f"{label} on Ray", unit="checkpoint")
    else:
        workers = worker_count(config.workers, len(todo))
        summaries = run_jobs(convert_job, todo, workers=workers, fetch=fetch, desc=label, unit="frame")
    print(total_line(summaries, time.perf_counter() - started))
    return 0
