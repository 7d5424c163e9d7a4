"""Convert several shards at once (`offline_rl.core.jobs`): one worker process each, or Ray tasks,
behind one progress bar counting the compressed bytes read. Shards not on disk yet are downloaded in
order while the ones already there convert."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from offline_rl.core.jobs import Progress, run_jobs, run_jobs_on_ray
from offline_rl.data.download import download_file
from offline_rl.data.rl_unplugged.shard_converter import ShardSummary, convert_shard
from offline_rl.data.rl_unplugged.sources import DOWNLOAD_HINT


@dataclass(frozen=True)
class ConversionOptions:
    skip_corrupt: bool = False
    compression: str | None = None


@dataclass(frozen=True)
class ConversionJob:
    shard: Path
    output: Path
    options: ConversionOptions = ConversionOptions()
    url: str | None = None
    """Where the shard is downloaded from if it is not on disk when its job starts."""


def needs_download(job: ConversionJob) -> bool:
    return job.url is not None and not job.shard.exists()


def fetch_missing(job: ConversionJob, progress: Progress) -> ConversionJob:
    """Download the job's shard if it is missing; the bar of bytes read grows by its size."""
    if job.url is not None and needs_download(job):
        download_file(job.url, job.shard, hint=DOWNLOAD_HINT, meter=progress.download)
        progress.grow(job.shard.stat().st_size)
    return job


def convert_job(job: ConversionJob, progress: Progress) -> ShardSummary:
    return convert_shard(
        job.shard,
        job.output,
        skip_corrupt=job.options.skip_corrupt,
        compression=job.options.compression,
        on_bytes_read=progress.advance,
    )


def _label(jobs: Sequence[ConversionJob]) -> str:
    return jobs[0].shard.name if len(jobs) == 1 else f"{len(jobs)} shards"


def convert_shards(
    jobs: Sequence[ConversionJob], *, workers: int = 1, show_progress: bool = True
) -> list[ShardSummary]:
    """Convert every job (in `workers` processes when > 1); raise one error naming the failures."""
    total = sum(job.shard.stat().st_size for job in jobs if not needs_download(job))  # a download grows it
    return run_jobs(
        convert_job,
        jobs,
        workers=workers,
        fetch=fetch_missing if any(map(needs_download, jobs)) else None,
        desc=f"convert {_label(jobs)}",
        unit="B",
        total=total,
        show_progress=show_progress,
    )


def convert_shards_on_ray(
    jobs: Sequence[ConversionJob], address: str, *, show_progress: bool = True
) -> list[ShardSummary]:
    """Every shard as a Ray task (one CPU each), each writing its own buffer atomically where every node
    sees it (shared storage, or one machine). `address`: `auto`, `ray://HOST:PORT`, or `local`."""
    return run_jobs_on_ray(
        convert_job,
        jobs,
        address,
        fetch=fetch_missing if any(map(needs_download, jobs)) else None,
        desc=f"convert {_label(jobs)} on Ray",
        unit="shard",
        show_progress=show_progress,
    )
