"""Independent jobs (RL Unplugged shards, DQN Replay checkpoints) in worker processes or Ray tasks, one bar.

Conversion is CPU-bound Python (parsing, hashing, decompressing), so jobs go to separate processes that
report progress through a queue; the parent draws one bar and prints each job's summary as it ends. A
failed job does not stop the others: errors are reported once all are done. On Ctrl-C every worker (in
the same process group) removes its temporary file; a SIGTERM that reaches the parent alone (Kubernetes
signals a container's first process) is passed on, so the workers stop at once.

Jobs whose inputs must be downloaded first (`fetch`) are a pipeline: one fetcher downloads them in order,
each job going to the workers once its inputs are on disk. Ray is an optional extra, imported only when
`--ray-address` (or `RAY_ADDRESS`) asks for it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.queues
import os
import queue
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from tqdm import tqdm

from offline_rl.core.errors import OfflineRLError
from offline_rl.core.interrupts import Terminated, exit_status
from offline_rl.core.progress import Meter, bar_meter, progress_bar


class Summary(Protocol):
    def line(self) -> str: ...


JobT = TypeVar("JobT")
SummaryT = TypeVar("SummaryT", bound=Summary)


_IDLE = Meter(grow=lambda _: None, advance=lambda _: None)


@dataclass(frozen=True)
class Progress(Meter):
    """What a job tells the bar of its work (`grow`, `advance`: frames, bytes read), and the download bar
    of the inputs it fetches before starting (`download`: bytes; drawn once a job downloads)."""

    download: Meter = _IDLE


Work = Callable[[JobT, Progress], SummaryT]
"""A job's work: a module-level function (worker processes and Ray tasks receive it by name)."""
Fetch = Callable[[JobT, Progress], JobT]
"""What a job downloads before its work, counted on `Progress.download`: returns the job as its work
needs it (e.g. with where to stream from). Also a module-level function."""

LAST_COUNTS_WAIT_S = 10.0
"""How long the parent waits, once every job has ended, for counts still on their way from the workers."""
_QUIET = Progress(grow=_IDLE.grow, advance=_IDLE.advance)
_progress_queue: multiprocessing.queues.Queue | None = None  # set in each worker by _init_worker
_job_running = False  # in a worker: whether a signal finds it inside a job


_STOPS = {signal.SIGTERM, signal.SIGINT}


@contextlib.contextmanager
def _stops_held_while_forking() -> Iterator[None]:
    """Ctrl-C and SIGTERM held while children are forked: one reaching a child before its handlers are in
    place (`_init_worker`, which releases them) would run ours mid-start and print a traceback."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _init_worker(progress: multiprocessing.queues.Queue) -> None:
    global _progress_queue
    _progress_queue = progress
    signal.signal(signal.SIGTERM, _stop_worker)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # Ctrl-C ignored (a background job) stays so
        signal.signal(signal.SIGINT, _stop_worker)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)  # a stop held while forking arrives now


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

    def sender(kind: str) -> Callable[[int], None]:
        return lambda count: sink.put((kind, count))

    download = Meter(grow=sender("download grow"), advance=sender("download advance"))
    return Progress(grow=sender("grow"), advance=sender("advance"), download=download)


def _run_in_worker(work: Callable[[JobT, Progress], Any], job: JobT) -> Any:
    """A job's work (or its fetch) in a worker process, which a signal stops inside it as the command."""
    global _job_running
    try:
        _job_running = True
        return work(job, _queued_progress())
    except KeyboardInterrupt as interrupt:
        # the job has cleaned up; exit, since a pool worker would otherwise start the jobs queued for it
        os._exit(exit_status(interrupt))
    finally:
        _job_running = False


def _work_in_worker(work: Callable[[JobT, Progress], Any], job: JobT, index: int) -> Any:
    """`_run_in_worker`, then an ("ended", index) message after the job's progress counts: the result
    comes back through the pool's own pipe, which can overtake the progress queue, and the bar must not
    close before the job's last counts are drawn on it (a queue keeps one process's messages in order)."""
    try:
        return _run_in_worker(work, job)
    finally:
        if _progress_queue is not None:
            _progress_queue.put(("ended", index))


def _fetch_in_order(fetch: Fetch[JobT], jobs: Sequence[JobT], progress: multiprocessing.queues.Queue) -> None:
    """The fetcher process: every job's inputs in the jobs' order, each job sent back as `("fetched",
    index, job)` once they are on disk, or with the user-facing error that stopped it (the job fails
    alone, the next one is fetched)."""
    _init_worker(progress)
    for index, job in enumerate(jobs):
        try:
            ready: Any = _run_in_worker(fetch, job)
        except OfflineRLError as error:
            ready = error
        progress.put(("fetched", index, ready))


class _Bars:
    """The jobs' bar, and the download bar below it, drawn when the first download starts (most runs
    have their inputs on disk and never show it)."""

    def __init__(self, work: tqdm) -> None:
        self.work = work
        self._download: tqdm | None = None
        counted = bar_meter(work)
        download = Meter(grow=self._download_grow, advance=self._download_advance)
        self.progress = Progress(grow=counted.grow, advance=counted.advance, download=download)

    def _download_bar(self) -> tqdm:
        if self._download is None:
            self._download = progress_bar(unit="B", unit_scale=True, desc="download", disable=self.work.disable)
        return self._download

    def _download_grow(self, count: int) -> None:
        bar_meter(self._download_bar()).grow(count)

    def _download_advance(self, count: int) -> None:
        self._download_bar().update(count)

    def count(self, kind: str, count: int) -> None:
        """A count a worker sent (`_queued_progress`)."""
        meter = self.progress.download if kind.startswith("download") else self.progress
        (meter.grow if kind.endswith("grow") else meter.advance)(count)

    def close(self) -> None:
        """The download bar's end: called as soon as the last job's downloads are done (so its rate is the
        downloads' own, not the whole run's), and again when the jobs are."""
        if self._download is not None:
            self._download.close()


def run_jobs(
    work: Work[JobT, SummaryT],
    jobs: Sequence[JobT],
    *,
    workers: int = 1,
    fetch: Fetch[JobT] | None = None,
    desc: str,
    unit: str,
    total: int | None = None,
    show_progress: bool = True,
) -> list[SummaryT]:
    """Every job's summary, in the jobs' order (in `workers` processes when > 1), each line printed as
    its job ends; if any job failed with a user-facing error, one error naming the first failure once
    the others are done. `fetch`: each job's downloads, in a fetcher process ahead of the workers
    (one worker converts while the next job downloads). `total`: the work known before the jobs
    start (none: the jobs `grow` it)."""
    with progress_bar(total=total, unit=unit, unit_scale=True, desc=desc, disable=not show_progress) as bar:
        bars = _Bars(bar)
        try:
            if len(jobs) == 1 or (workers <= 1 and fetch is None):
                results = _run_here(work, fetch, jobs, bars)
            else:
                results = _run_in_workers(work, fetch, jobs, workers, bars)
        finally:
            bars.close()
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


def _run_here(
    work: Work[JobT, SummaryT], fetch: Fetch[JobT] | None, jobs: Sequence[JobT], bars: _Bars
) -> list[SummaryT | OfflineRLError]:
    results: list[SummaryT | OfflineRLError] = []
    for index, job in enumerate(jobs):
        try:
            ready = fetch(job, bars.progress) if fetch is not None else job
            if index == len(jobs) - 1:
                bars.close()
            result: SummaryT | OfflineRLError = work(ready, bars.progress)
        except OfflineRLError as error:
            result = error
        _report(bars.work, result)
        results.append(result)
    return results


def _run_in_workers(
    work: Work[JobT, SummaryT], fetch: Fetch[JobT] | None, jobs: Sequence[JobT], workers: int, bars: _Bars
) -> list[SummaryT | OfflineRLError]:
    context = multiprocessing.get_context("fork")
    progress = context.Queue()
    fetcher = None
    if fetch is not None:  # forked first, while this process has no pool threads yet
        fetcher = context.Process(target=_fetch_in_order, args=(fetch, jobs, progress), name="fetcher")
        with _stops_held_while_forking():
            fetcher.start()
    executor = ProcessPoolExecutor(
        max_workers=min(workers, len(jobs)), mp_context=context, initializer=_init_worker, initargs=(progress,)
    )
    running: dict[Future[SummaryT], int] = {}
    outcomes: dict[int, SummaryT | OfflineRLError] = {}
    worked: set[int] = set()  # the jobs given to the workers
    ended: set[int] = set()  # those whose progress counts have all come (`_work_in_worker`)
    fetched = 0
    try:
        if fetcher is None:
            with _stops_held_while_forking():  # the first submit forks the workers
                running = {executor.submit(_work_in_worker, work, job, i): i for i, job in enumerate(jobs)}
            worked.update(running.values())
        while len(outcomes) < len(jobs):
            done: set[Future[SummaryT]] = set()
            if running:
                done, _ = wait(running, timeout=0.2, return_when=FIRST_COMPLETED)
            for index, ready in _drain(progress, bars, ended, wait_s=0.0 if running else 0.2):
                if isinstance(ready, OfflineRLError):
                    outcomes[index] = ready
                else:
                    with _stops_held_while_forking():
                        running[executor.submit(_work_in_worker, work, ready, index)] = index
                    worked.add(index)
                fetched += 1
                if fetched == len(jobs):
                    bars.close()
            for future in done:
                index = running.pop(future)
                outcomes[index] = _outcome(future)
                _report(bars.work, outcomes[index])
            if fetcher is not None and not running and not fetcher.is_alive() and progress.empty():
                missing = len(jobs) - len(outcomes)
                if missing:  # killed from outside (the OOM killer): its jobs would never come
                    stopped = f"the download process stopped (exit status {fetcher.exitcode})"
                    raise OfflineRLError(f"{stopped}, {missing} job(s) unfetched")
        deadline = time.monotonic() + LAST_COUNTS_WAIT_S  # a worker killed from outside sends nothing more
        while not worked <= ended and time.monotonic() < deadline:
            _drain(progress, bars, ended, wait_s=0.05)
        _drain(progress, bars, ended)
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt):  # Ctrl-C reaches the workers too; a SIGTERM may not
            for worker in multiprocessing.active_children():
                worker.terminate()  # SIGTERM: the worker stops its job, removing its temporary file
        executor.shutdown(wait=True, cancel_futures=True)
        if fetcher is not None:
            fetcher.join()
        raise
    executor.shutdown(wait=True)
    if fetcher is not None:
        fetcher.join()
    return [outcomes[index] for index in range(len(jobs))]


def _outcome(future: Future[SummaryT]) -> SummaryT | OfflineRLError:
    error = future.exception()
    if error is None:
        return future.result()
    if isinstance(error, OfflineRLError):
        return error
    raise error


def _drain(
    progress: multiprocessing.queues.Queue, bars: _Bars, ended: set[int], wait_s: float = 0.0
) -> list[tuple[int, Any]]:
    """Counts the workers sent, drawn on the bars, and the jobs whose counts are all in, added to `ended`;
    the jobs the fetcher has readied, returned (`wait_s`: how long to wait for the first message when
    none is there yet)."""
    fetched = []
    while True:
        try:
            message = progress.get(timeout=wait_s) if wait_s else progress.get_nowait()
        except queue.Empty:
            return fetched
        wait_s = 0.0
        if message[0] == "fetched":
            fetched.append(message[1:])
        elif message[0] == "ended":
            ended.add(message[1])
        else:
            bars.count(*message)


def _run_as_ray_task(work: Work[JobT, SummaryT], fetch: Fetch[JobT] | None, job: JobT) -> SummaryT | OfflineRLError:
    """One job in a Ray worker, its downloads first (on the node that converts it); a user-facing error
    comes back as a value, to be reported with the others."""
    try:
        return work(fetch(job, _QUIET) if fetch is not None else job, _QUIET)
    except OfflineRLError as error:
        return error


def run_jobs_on_ray(
    work: Work[JobT, SummaryT],
    jobs: Sequence[JobT],
    address: str,
    *,
    fetch: Fetch[JobT] | None = None,
    desc: str,
    unit: str,
    show_progress: bool = True,
) -> list[SummaryT]:
    """Every job as a Ray task (one CPU each), each writing its own output atomically where every node
    sees it (shared storage, or one machine); the bar counts jobs. `address`: `auto`, `ray://HOST:PORT`,
    or `local`."""

    ray = connect(address)
    task = ray.remote(num_cpus=1, max_retries=3)(_run_as_ray_task)
    pending = [task.remote(work, fetch, job) for job in jobs]
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


LOCAL = "local"
"""`--ray-address local`: a Ray runtime on this machine, for as long as the command runs."""


def connect(address: str) -> Any:
    """The `ray` module, connected to `address` (`auto`, `ray://HOST:PORT`, `HOST:PORT` or `local`);
    one-line errors when Ray is missing or the cluster cannot be reached."""
    try:
        import ray  # heavy (Ray): loaded only when used
    except ImportError:
        raise OfflineRLError('--ray-address: Ray is not installed; pip install -e ".[ray]"') from None
    if ray.is_initialized():
        return ray
    try:
        if address == LOCAL:
            ray.init(include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as error:
        reason = " ".join(str(error).split())[:300]
        raise OfflineRLError(f"--ray-address {address}: cannot connect ({reason})") from None
    return ray
