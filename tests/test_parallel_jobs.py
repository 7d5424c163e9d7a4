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
from offline_rl.errors import DatasetError, OfflineRLError
from offline_rl.interrupts import EXIT_TERMINATED
from offline_rl.parallel_jobs import Progress, run_jobs


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


def final_count(stderr: str) -> tuple[float, float]:
    """The last `n/total` the bar showed (a log's plain lines: stderr is no terminal here)."""
    done, total = re.findall(r"([\d.]+)/([\d.]+)", stderr)[-1]
    return float(done), float(total)


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
from offline_rl.apps.cli import run_main
from offline_rl.atomic import atomic_path
from offline_rl.parallel_jobs import run_jobs

folder = Path(sys.argv[1])

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

run_main(lambda argv: run_jobs(work, [int(n) for n in sys.argv[2:]], workers=2, desc="jobs", unit="job") and 0)
"""


@pytest.mark.parametrize(
    ("jobs", "running"),
    [
        ([1, 2, 3, 4, 5, 6], {1, 2}),  # more jobs than workers: the ones queued behind must not start
        ([0, 1], {0, 1}),  # job 0 is done and its worker idle when the signal comes
    ],
)
def test_sigterm_to_the_parent_stops_every_worker_now_and_leaves_no_temporary(
    jobs: list[int], running: set[int], tmp_path: Path
) -> None:
    """As Kubernetes does, to the first process alone: it passes the signal on. Jobs that were running
    stop (their temporaries removed), none queued starts, an idle worker exits without a traceback,
    and what had finished is kept."""
    script = tmp_path / "stoppable.py"
    script.write_text(STOPPABLE)
    folder = tmp_path / "jobs"
    folder.mkdir()
    process = subprocess.Popen(
        [sys.executable, str(script), str(folder), *map(str, jobs)],
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
    assert err.strip().splitlines()[-1] == "terminated (SIGTERM): nothing partial was written"
    assert "Traceback" not in err
    assert started() == running
    kept = sorted(path.name for path in folder.iterdir() if not path.name.startswith("started-"))
    assert kept == (["out-0"] if 0 in running else [])  # no temporary left, the finished job kept
