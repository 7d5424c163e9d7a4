"""Convert several shards at once, one worker process each, behind one progress bar.

Conversion is CPU-bound Python (parsing, hashing, PNG decoding), so shards go to separate processes;
workers report compressed bytes read through a queue and the parent draws a single bar over all of
them. A shard that fails does not stop the others: its error is collected and reported once they
are done. On Ctrl-C every worker (same process group, so it receives the signal too) removes its
temporary file before the parent exits. A SIGTERM may reach the parent alone (Kubernetes signals a
container's first process only, then kills everything after its grace period), so the parent passes
it on: the workers stop their shards at once rather than finish them, which takes ~30 s a shard.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.queues
import queue
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from offline_rl.errors import OfflineRLError
from offline_rl.interrupts import Terminated
from offline_rl.progress import progress_bar
from offline_rl.rl_unplugged.shard_converter import ShardSummary, convert_shard

_progress_queue: multiprocessing.queues.Queue | None = None  # set in each worker by _init_worker


@dataclass(frozen=True)
class ConversionJob:
    shard: Path
    output: Path


@dataclass(frozen=True)
class ConversionOptions:
    skip_corrupt: bool = False
    compression: str | None = None


def _init_worker(progress: multiprocessing.queues.Queue) -> None:
    global _progress_queue
    _progress_queue = progress


def _report(count: int) -> None:
    if _progress_queue is not None:
        _progress_queue.put(count)


def _convert(job: ConversionJob, options: ConversionOptions, on_bytes_read: Callable[[int], None]) -> ShardSummary:
    return convert_shard(
        job.shard,
        job.output,
        skip_corrupt=options.skip_corrupt,
        compression=options.compression,
        on_bytes_read=on_bytes_read,
    )


def _convert_in_worker(job: ConversionJob, options: ConversionOptions) -> ShardSummary:
    return _convert(job, options, _report)


def convert_shards(
    jobs: Sequence[ConversionJob], options: ConversionOptions, *, workers: int = 1, show_progress: bool = True
) -> list[ShardSummary]:
    """Convert every job (in `workers` processes when > 1); raise one error naming the failures."""
    total = sum(job.shard.stat().st_size for job in jobs)
    label = jobs[0].shard.name if len(jobs) == 1 else f"{len(jobs)} shards"
    with progress_bar(
        total=total, unit="B", unit_scale=True, desc=f"convert {label}", disable=not show_progress
    ) as bar:
        if workers <= 1 or len(jobs) == 1:
            results = _convert_here(jobs, options, bar)
        else:
            results = _convert_in_workers(jobs, options, workers, bar)
    return _summaries_or_error(results)


def _summaries_or_error(results: Sequence[ShardSummary | Exception]) -> list[ShardSummary]:
    """The summaries; if any shard failed, the others' lines, then one error naming the first failure."""
    summaries = [result for result in results if isinstance(result, ShardSummary)]
    failures = [result for result in results if isinstance(result, Exception)]
    if failures:
        for summary in summaries:
            print(summary.line())
        others = f" ({len(failures) - 1} more shard(s) failed)" if len(failures) > 1 else ""
        raise OfflineRLError(f"{failures[0]}{others}")
    return summaries


def _convert_here(
    jobs: Sequence[ConversionJob], options: ConversionOptions, bar: tqdm
) -> list[ShardSummary | Exception]:
    results: list[ShardSummary | Exception] = []
    for job in jobs:
        try:
            results.append(_convert(job, options, bar.update))
        except OfflineRLError as error:
            results.append(error)
    return results


def _convert_in_workers(
    jobs: Sequence[ConversionJob], options: ConversionOptions, workers: int, bar: tqdm
) -> list[ShardSummary | Exception]:
    context = multiprocessing.get_context("fork")
    progress = context.Queue()
    executor = ProcessPoolExecutor(
        max_workers=min(workers, len(jobs)), mp_context=context, initializer=_init_worker, initargs=(progress,)
    )
    futures: list[Future[ShardSummary]] = []
    try:
        futures = [executor.submit(_convert_in_worker, job, options) for job in jobs]
        pending = set(futures)
        while pending:
            _, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            _drain(progress, bar)
        _drain(progress, bar)
    except BaseException as error:
        if isinstance(error, Terminated):
            for worker in multiprocessing.active_children():
                worker.terminate()  # SIGTERM: the worker raises Terminated too and removes its temporary file
        executor.shutdown(wait=True, cancel_futures=True)
        raise
    executor.shutdown(wait=True)
    results: list[ShardSummary | Exception] = []
    for future in futures:
        error = future.exception()
        if error is None:
            results.append(future.result())
        elif isinstance(error, OfflineRLError):
            results.append(error)
        else:
            raise error
    return results


def _drain(progress: multiprocessing.queues.Queue, bar: tqdm) -> None:
    while True:
        try:
            bar.update(progress.get_nowait())
        except queue.Empty:
            return


def _convert_as_ray_task(job: ConversionJob, options: ConversionOptions) -> ShardSummary | OfflineRLError:
    """One shard in a Ray worker; a user-facing error comes back as a value, to be reported with the others."""
    try:
        return _convert(job, options, lambda _: None)
    except OfflineRLError as error:
        return error


def convert_shards_on_ray(
    jobs: Sequence[ConversionJob], options: ConversionOptions, address: str, *, show_progress: bool = True
) -> list[ShardSummary]:
    """Every shard as a Ray task (one CPU each), each writing its own buffer atomically where every node
    sees it (shared storage, or one machine). `address`: `auto`, `ray://HOST:PORT`, or `local`."""
    from offline_rl.ray_runtime import connect

    ray = connect(address)
    task = ray.remote(num_cpus=1, max_retries=3)(_convert_as_ray_task)
    pending = [task.remote(job, options) for job in jobs]
    results: dict[Any, ShardSummary | OfflineRLError] = {}
    refs = list(pending)
    with progress_bar(
        total=len(jobs), unit="shard", desc=f"convert {len(jobs)} shards on Ray", disable=not show_progress
    ) as bar:
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    results[ref] = ray.get(ref)
                    bar.update(1)
        except KeyboardInterrupt:
            for ref in pending:
                ray.cancel(ref, force=True)  # a cancelled worker leaves only its temporary file's name behind
            raise
    ordered = [results[ref] for ref in refs]
    return _summaries_or_error(ordered)
