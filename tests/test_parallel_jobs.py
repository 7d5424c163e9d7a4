"""The job runner behind both converters' `--workers`: order, progress, summaries and failures."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import script_env
from offline_rl.core import jobs as parallel_jobs
from offline_rl.core.errors import DatasetError, OfflineRLError
from offline_rl.core.interrupts import EXIT_TERMINATED
from offline_rl.core.jobs import Progress, run_jobs


@dataclass(frozen=True)
class Job:
    number: int
    size: int
    seconds: float = 0.0
    fails: type[Exception] | None = None


@dataclass(frozen=True)
class Done:
    number: int
    pid: int

    def line(self) -> str:
        return f"job {self.number} done"


def work(job: Job, progress: Progress) -> Done:
    """Learns its size only once started (as a checkpoint's frame count), then does it in pieces."""
    progress.grow(job.size)
    time.sleep(job.seconds)
    if job.fails is not None:
        raise job.fails(f"job {job.number}: damaged")
    for _ in range(job.size):
        progress.advance(1)
    return Done(job.number, os.getpid())


def final_count(stderr: str, desc: str = "convert") -> tuple[float, float]:
    """The last `n/total` the bar `desc` showed (a log's plain lines: stderr is no terminal here)."""
    scale = {"": 1, "k": 1e3, "M": 1e6}
    done, done_scale, total, total_scale = re.findall(
        rf"^{desc}: .*?([\d.]+)([kM]?)/([\d.]+)([kM]?)", stderr, flags=re.MULTILINE
    )[-1]
    return float(done) * scale[done_scale], float(total) * scale[total_scale]


@dataclass(frozen=True)
class Download:
    """A job with an input to fetch first, of `size` bytes in `chunks` pieces, then `frames` to convert;
    with a `folder`, its fetch and its work wait for each other there (see the pipeline test)."""

    number: int
    size: int
    chunks: int
    frames: int
    folder: Path | None = None
    fails: bool = False


def wait_for(path: Path) -> None:
    deadline = time.monotonic() + 30
    while not path.exists():
        if time.monotonic() > deadline:
            raise DatasetError(f"{path.name} never came: the downloads and the work did not overlap")
        time.sleep(0.01)


def fetch_download(job: Download, progress: Progress) -> Download:
    if job.folder is not None and job.number > 0:  # job 1 is fetched only while job 0 is being worked on
        wait_for(job.folder / "working-0")
    if job.fails:
        raise DatasetError(f"job {job.number}: not on the mirror")
    progress.download.grow(job.size)
    for _ in range(job.chunks):
        progress.download.advance(job.size // job.chunks)
    if job.folder is not None:
        (job.folder / f"fetched-{job.number}").touch()
    return job


def fetch_then_die(job: Download, progress: Progress) -> Download:
    if job.number == 1:
        time.sleep(1)  # for job 0's message to leave: a killed process loses what its queue still holds
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would
    return job


def work_after_download(job: Download, progress: Progress) -> Done:
    if job.folder is not None and job.number == 0:  # ... and job 0's work ends only once job 1 is fetched
        (job.folder / "working-0").touch()
        wait_for(job.folder / "fetched-1")
    return work(Job(job.number, job.frames), progress)


@pytest.mark.parametrize("workers", [1, 2])
def test_summaries_come_in_job_order_each_printed_once_and_the_bar_sums_every_job(workers: int, capsys) -> None:
    jobs = [Job(0, 5, seconds=0.6), Job(1, 7), Job(2, 3, seconds=0.2)]  # with 2 workers, 1 ends before 0
    summaries = run_jobs(work, jobs, workers=workers, desc="convert", unit="frame")
    assert [summary.number for summary in summaries] == [0, 1, 2]
    pids = {summary.pid for summary in summaries}
    assert (pids == {os.getpid()}) if workers == 1 else (os.getpid() not in pids and len(pids) == 2)
    captured = capsys.readouterr()
    assert sorted(captured.out.splitlines()) == ["job 0 done", "job 1 done", "job 2 done"]
    assert final_count(captured.err) == (15, 15)
    assert "download" not in captured.err


class LateQueue:
    """A worker's progress queue whose messages leave 0.5 s late, in order: as when the queue's pipe
    lags behind the pool's, which brings a job's result back at once."""

    def __init__(self, queue) -> None:
        import threading

        self.queue, self.pending, self.lock = queue, [], threading.Lock()
        threading.Thread(target=self._forward, daemon=True).start()

    def put(self, item) -> None:
        with self.lock:
            self.pending.append(item)

    def _forward(self) -> None:
        time.sleep(0.5)
        while True:
            with self.lock:
                items, self.pending = self.pending, []
            for item in items:
                self.queue.put(item)
            time.sleep(0.01)


ORIGINAL_INIT_WORKER = parallel_jobs._init_worker


def init_worker_with_a_late_queue(progress) -> None:
    ORIGINAL_INIT_WORKER(LateQueue(progress))


def test_the_bar_gets_every_count_even_when_the_results_come_back_first(monkeypatch, capsys) -> None:
    """A job's result reaches the parent before its progress counts: the bar still ends at the total."""
    monkeypatch.setattr(parallel_jobs, "_init_worker", init_worker_with_a_late_queue)
    summaries = run_jobs(work, [Job(0, 5), Job(1, 7), Job(2, 3)], workers=2, desc="convert", unit="frame")
    assert [summary.number for summary in summaries] == [0, 1, 2]
    assert final_count(capsys.readouterr().err) == (15, 15)


@pytest.mark.parametrize("workers", [1, 2])
def test_the_jobs_downloads_are_counted_on_one_bar_of_their_own(workers: int, capsys) -> None:
    """All jobs' bytes go to one download bar, their work to the jobs' bar. Runs that download nothing
    never show a download bar (the test above). A job whose download fails fails alone."""
    jobs = [Download(0, 3000, 3, 4), Download(1, 500, 1, 2, fails=True), Download(2, 2000, 4, 6)]
    with pytest.raises(OfflineRLError, match=r"^job 1: not on the mirror$"):
        run_jobs(work_after_download, jobs, workers=workers, fetch=fetch_download, desc="convert", unit="frame")
    captured = capsys.readouterr()
    assert sorted(captured.out.splitlines()) == ["job 0 done", "job 2 done"]
    assert final_count(captured.err, "download") == (5000, 5000)
    assert final_count(captured.err, "convert") == (10, 10)
    assert "\x1b" not in captured.err  # a log gets lines, not a terminal's cursor moves between the two bars


@pytest.mark.parametrize("workers", [1, 2])
def test_the_next_job_downloads_while_one_is_worked_on(workers: int, tmp_path: Path) -> None:
    """A pipeline, even with one worker: job 0's work waits until job 1 is fetched, and job 1's fetch
    until job 0's work has started. Downloading everything first, or each job's inputs in its worker
    before its work, never gets there (each waits 30 s, then fails)."""
    jobs = [Download(n, 100, 1, 2, folder=tmp_path) for n in range(3)]
    summaries = run_jobs(work_after_download, jobs, workers=workers, fetch=fetch_download, desc="convert", unit="frame")
    assert [summary.number for summary in summaries] == [0, 1, 2]
    assert os.getpid() not in {summary.pid for summary in summaries}  # a worker, not this process, did the work


def test_a_download_process_killed_from_outside_is_one_error_not_a_hang(capsys) -> None:
    jobs = [Download(n, 1, 1, 1) for n in range(3)]
    message = r"^the download process stopped \(exit status -9\), 2 job\(s\) unfetched$"
    with pytest.raises(OfflineRLError, match=message):
        run_jobs(work_after_download, jobs, workers=2, fetch=fetch_then_die, desc="convert", unit="frame")
    assert capsys.readouterr().out.splitlines() == ["job 0 done"]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_failed_job_does_not_stop_the_others_and_the_error_names_the_first(workers: int, capsys) -> None:
    jobs = [Job(0, 2, fails=DatasetError), Job(1, 4, seconds=0.3), Job(2, 1, fails=DatasetError)]
    with pytest.raises(OfflineRLError, match=r"^job 0: damaged \(1 more failed\)$"):
        run_jobs(work, jobs, workers=workers, desc="convert", unit="frame")
    assert capsys.readouterr().out.splitlines() == ["job 1 done"]  # the job that ended well says so


@pytest.mark.parametrize("workers", [1, 2])
def test_a_bug_in_a_job_is_raised_as_itself(workers: int) -> None:
    """Only user-facing errors are collected; anything else is a bug and keeps its type and traceback."""
    with pytest.raises(ZeroDivisionError, match="job 1"):
        run_jobs(work, [Job(0, 1), Job(1, 1, fails=ZeroDivisionError)], workers=workers, desc="convert", unit="frame")


STOPPABLE = """
import sys, time
from dataclasses import dataclass
from pathlib import Path
from offline_rl.cli.main import run_main
from offline_rl.core.files import atomic_path
from offline_rl.core.jobs import run_jobs

folder, downloads = Path(sys.argv[1]), sys.argv[2] == "with-downloads"

@dataclass(frozen=True)
class Written:
    number: int
    def line(self):
        return f"job {self.number} done"

def work(number, progress):
    (folder / f"started-{number}").touch()
    with atomic_path(folder / f"out-{number}") as tmp:
        tmp.write_text("partial")
        time.sleep(0 if number == 0 else 600)
    return Written(number)

def fetch(number, progress):  # jobs 100 and up download (for ever); the others have their inputs
    if number >= 100:
        (folder / f"started-{number}").touch()
        with atomic_path(folder / f"input-{number}") as tmp:
            tmp.write_text("partial")
            time.sleep(600)
    return number

jobs = [int(n) for n in sys.argv[3:]]
run_main(
    lambda argv: run_jobs(work, jobs, workers=2, fetch=fetch if downloads else None, desc="jobs", unit="job") and 0
)
"""


@pytest.mark.parametrize(
    ("mode", "jobs", "running"),
    [
        ("plain", [1, 2, 3, 4, 5, 6], {1, 2}),  # more jobs than workers: the ones queued behind must not start
        ("plain", [0, 1], {0, 1}),  # job 0 is done and its worker idle when the signal comes
        ("with-downloads", [1, 101, 2], {1, 101}),  # job 1 at work, job 101 downloading, job 2 waiting for it
    ],
)
def test_sigterm_to_the_parent_stops_every_worker_now_and_leaves_no_temporary(
    mode: str, jobs: list[int], running: set[int], tmp_path: Path
) -> None:
    """As Kubernetes does, to the first process alone: it passes the signal on. Jobs that were running
    stop (their temporaries removed), none queued starts, an idle worker exits without a traceback,
    and what had finished is kept. A download in progress stops too, its temporary removed."""
    script = tmp_path / "stoppable.py"
    script.write_text(STOPPABLE)
    folder = tmp_path / "jobs"
    folder.mkdir()
    process = subprocess.Popen(
        [sys.executable, str(script), str(folder), mode, *map(str, jobs)],
        cwd=tmp_path, env=script_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120

    def started() -> set[int]:
        return {int(path.name.split("-")[1]) for path in folder.glob("started-*")}

    while started() != running or (0 in running and not (folder / "out-0").exists()):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)  # a job left running would sleep for 600 s
    assert process.returncode == EXIT_TERMINATED, err
    assert err.strip().splitlines()[-1] == "terminated (SIGTERM): no output was left half-written"
    assert "Traceback" not in err
    assert started() == running
    kept = sorted(path.name for path in folder.iterdir() if not path.name.startswith("started-"))
    assert kept == (["out-0"] if 0 in running else [])  # no temporary left, the finished job kept


def _stopped_while_starting(progress) -> None:
    """A worker's start as a stop finds it: SIGTERM before its handlers are in place (`_init_worker`)."""
    os.kill(os.getpid(), signal.SIGTERM)
    parallel_jobs._init_worker(progress)
    time.sleep(5)  # the stop ended it before this


def test_a_stop_that_reaches_a_worker_while_it_starts_ends_it_quietly(capfd: pytest.CaptureFixture[str]) -> None:
    """Forked workers inherit the parent's handlers, which raise: a SIGTERM passed on to a worker still
    starting printed that worker's traceback. Held while forking, it arrives once the worker's own
    handler is in place, which ends an idle worker quietly."""
    import multiprocessing

    def raising(signum: int, frame: object) -> None:
        raise RuntimeError("the parent's handler ran in the child")

    context = multiprocessing.get_context("fork")
    previous = signal.signal(signal.SIGTERM, raising)
    try:
        with parallel_jobs._stops_held_while_forking():
            child = context.Process(target=_stopped_while_starting, args=(context.Queue(),))
            child.start()
        child.join(timeout=60)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert child.exitcode == 128 + signal.SIGTERM
    assert "Traceback" not in capfd.readouterr().err
