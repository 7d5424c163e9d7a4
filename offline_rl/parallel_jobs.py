"""Run independent conversion jobs (RL Unplugged shards, DQN Replay checkpoints) in worker processes
or as Ray tasks, behind one progress bar.

Conversion is CPU-bound Python (parsing, hashing, decompressing), so jobs go to separate processes;
workers report their progress through a queue and the parent draws a single bar over all of them,
printing each job's summary line as it ends. A job that fails does not stop the others: its error is
collected and reported once they are done. On Ctrl-C every worker (same process group, so it
receives the signal too) removes its temporary file before the parent exits. A SIGTERM may reach
the parent alone (Kubernetes signals a container's first process only, then kills everything after
its grace period), so the parent passes it on: the workers stop their jobs at once rather than
finish them, which can take minutes.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.queues
import os
import queue
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from tqdm import tqdm

from offline_rl.errors import OfflineRLError
from offline_rl.interrupts import Terminated, exit_status
from offline_rl.progress import progress_bar


class Summary(Protocol):
    def line(self) -> str: ...


JobT = TypeVar("JobT")
SummaryT = TypeVar("SummaryT", bound=Summary)


@dataclass(frozen=True)
class Progress:
    """What a job tells the bar: work it has found (`grow`: the bar's total goes up, for jobs that learn
    their size only once they have opened their input) and work it has done (`advance`)."""

    grow: Callable[[int], None]
    advance: Callable[[int], None]


Work = Callable[[JobT, Progress], SummaryT]
"""A job's work: a module-level function (worker processes and Ray tasks receive it by name)."""

_QUIET = Progress(grow=lambda _: None, advance=lambda _: None)
_progress_queue: multiprocessing.queues.Queue | None = None  # set in each worker by _init_worker
_job_running = False  # in a worker: whether a signal finds it inside a job


def _init_worker(progress: multiprocessing.queues.Queue) -> None:
    global _progress_queue
    _progress_queue = progress
    signal.signal(signal.SIGTERM, _stop_worker)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # Ctrl-C ignored (a background job) stays so
        signal.signal(signal.SIGINT, _stop_worker)


def _stop_worker(signum: int, frame: Any) -> None:
    """Ctrl-C or SIGTERM in a worker: a job stops as the command does, removing its temporary file on
    the way out; an idle worker (its jobs done, the others' still running) just exits, quietly."""
    if not _job_running:
        os._exit(128 + signum)
    for stopping in (signal.SIGTERM, signal.SIGINT):  # once: the parent passes a SIGTERM on as well
        signal.signal(stopping, signal.SIG_IGN)
    raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt


def _queued_progress() -> Progress:
    sink = _progress_queue
    if sink is None:
        return _QUIET
    return Progress(grow=lambda count: sink.put(("grow", count)), advance=lambda count: sink.put(("advance", count)))


def _run_in_worker(work: Work[JobT, SummaryT], job: JobT) -> SummaryT:
    global _job_running
    try:
        _job_running = True
        return work(job, _queued_progress())
    except KeyboardInterrupt as interrupt:
        # the job has cleaned up; exit, since a pool worker would otherwise start the jobs queued for it
        os._exit(exit_status(interrupt))
    finally:
        _job_running = False


def _bar_progress(bar: tqdm) -> Progress:
    def grow(count: int) -> None:
        bar.total = (bar.total or 0) + count  # shown with the next update (a log gets no extra line)

    return Progress(grow=grow, advance=bar.update)


def run_jobs(
    work: Work[JobT, SummaryT],
    jobs: Sequence[JobT],
    *,
    workers: int = 1,
    desc: str,
    unit: str,
    total: int | None = None,
    show_progress: bool = True,
) -> list[SummaryT]:
    """Every job's summary, in the jobs' order (in `workers` processes when > 1), each line printed as
    its job ends; if any job failed with a user-facing error, one error naming the first failure once
    the others are done. `total`: the work known before the jobs start (none: the jobs `grow` it)."""
    with progress_bar(total=total, unit=unit, unit_scale=True, desc=desc, disable=not show_progress) as bar:
        if workers <= 1 or len(jobs) == 1:
            results = _run_here(work, jobs, bar)
        else:
            results = _run_in_workers(work, jobs, workers, bar)
    return _summaries_or_error(results)


def _summaries_or_error(results: Sequence[SummaryT | OfflineRLError]) -> list[SummaryT]:
    summaries = [result for result in results if not isinstance(result, OfflineRLError)]
    failures = [result for result in results if isinstance(result, OfflineRLError)]
    if failures:
        others = f" ({len(failures) - 1} more failed)" if len(failures) > 1 else ""
        raise OfflineRLError(f"{failures[0]}{others}")
    return summaries


def _report(bar: tqdm, result: Summary | OfflineRLError) -> None:
    if not isinstance(result, OfflineRLError):
        bar.write(result.line())


def _run_here(work: Work[JobT, SummaryT], jobs: Sequence[JobT], bar: tqdm) -> list[SummaryT | OfflineRLError]:
    results: list[SummaryT | OfflineRLError] = []
    progress = _bar_progress(bar)
    for job in jobs:
        try:
            result: SummaryT | OfflineRLError = work(job, progress)
        except OfflineRLError as error:
            result = error
        _report(bar, result)
        results.append(result)
    return results


def _run_in_workers(
    work: Work[JobT, SummaryT], jobs: Sequence[JobT], workers: int, bar: tqdm
) -> list[SummaryT | OfflineRLError]:
    context = multiprocessing.get_context("fork")
    progress = context.Queue()
    executor = ProcessPoolExecutor(
        max_workers=min(workers, len(jobs)), mp_context=context, initializer=_init_worker, initargs=(progress,)
    )
    futures: list[Future[SummaryT]] = []
    outcomes: dict[Future[SummaryT], SummaryT | OfflineRLError] = {}
    try:
        futures = [executor.submit(_run_in_worker, work, job) for job in jobs]
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            _drain(progress, bar)
            for future in done:
                outcomes[future] = _outcome(future)
                _report(bar, outcomes[future])
        _drain(progress, bar)
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt):  # Ctrl-C reaches the workers too; a SIGTERM may not
            for worker in multiprocessing.active_children():
                worker.terminate()  # SIGTERM: the worker stops its job, removing its temporary file
        executor.shutdown(wait=True, cancel_futures=True)
        raise
    executor.shutdown(wait=True)
    return [outcomes[future] for future in futures]


def _outcome(future: Future[SummaryT]) -> SummaryT | OfflineRLError:
    error = future.exception()
    if error is None:
        return future.result()
    if isinstance(error, OfflineRLError):
        return error
    raise error


def _drain(progress: multiprocessing.queues.Queue, bar: tqdm) -> None:
    here = _bar_progress(bar)
    while True:
        try:
            kind, count = progress.get_nowait()
        except queue.Empty:
            return
        (here.grow if kind == "grow" else here.advance)(count)


def _run_as_ray_task(work: Work[JobT, SummaryT], job: JobT) -> SummaryT | OfflineRLError:
    """One job in a Ray worker; a user-facing error comes back as a value, to be reported with the others."""
    try:
        return work(job, _QUIET)
    except OfflineRLError as error:
        return error


def run_jobs_on_ray(
    work: Work[JobT, SummaryT], jobs: Sequence[JobT], address: str, *, desc: str, unit: str, show_progress: bool = True
) -> list[SummaryT]:
    """Every job as a Ray task (one CPU each), each writing its own output atomically where every node
    sees it (shared storage, or one machine); the bar counts jobs. `address`: `auto`, `ray://HOST:PORT`,
    or `local`."""
    from offline_rl.ray_runtime import connect

    ray = connect(address)
    task = ray.remote(num_cpus=1, max_retries=3)(_run_as_ray_task)
    pending = [task.remote(work, job) for job in jobs]
    results: dict[Any, SummaryT | OfflineRLError] = {}
    refs = list(pending)
    with progress_bar(total=len(jobs), unit=unit, desc=desc, disable=not show_progress) as bar:
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    results[ref] = ray.get(ref)
                    _report(bar, results[ref])
                    bar.update(1)
        except KeyboardInterrupt:
            for ref in pending:
                ray.cancel(ref, force=True)  # a cancelled worker leaves only its temporary file's name behind
            raise
    return _summaries_or_error([results[ref] for ref in refs])
