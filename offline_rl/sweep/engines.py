"""Where trials run: as parallel processes on this machine (the default), or as Ray tasks.

Both hand every trial to `offline_rl.sweep.trial.run_trial` (a batch of seeds as one trial whose
outcome is read per seed, `offline_rl.sweep.seed_batches`), so trials, logs and results are the same
either way. The local engine never imports Ray.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offline_rl.core.gpu_sharing import GpuAssignment
from offline_rl.core.jobs import connect
from offline_rl.sweep.seed_batches import member_outcome
from offline_rl.sweep.spec import Trial
from offline_rl.sweep.trial import TrialOutcome, run_trial

INTERRUPT_GRACE_S = 30.0


@dataclass
class TrialJob:
    """Everything `run_trial` needs for one trial: picklable, for Ray."""

    module: str
    trial_id: str
    arguments: list[str]
    directory: str
    per_invocation: list[str] = field(default_factory=list)
    max_retries: int = 2
    cwd: str | None = None
    fqe_updates: int = 0
    batch: tuple[Trial, ...] = ()
    """The trials this job trains as one batch of seeds (`--num-seeds`); none for a trial alone."""

    @property
    def ids(self) -> list[str]:
        """The trials this job reports."""
        return [trial.id for trial in self.batch] or [self.trial_id]

    def kwargs(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "trial_id": self.trial_id,
            "arguments": self.arguments,
            "directory": self.directory,
            "per_invocation": self.per_invocation,
            "max_retries": self.max_retries,
            "cwd": self.cwd,
            "fqe_updates": self.fqe_updates,
        }


Started = Callable[[str], None]
Finished = Callable[[TrialOutcome], None]


def run_job(job: TrialJob, **extra: Any) -> list[TrialOutcome]:
    """`run_trial` for the job; the outcome of each of its trials (a batch's, read from each seed's folder)."""
    outcome = run_trial(**job.kwargs(), **extra)
    return [member_outcome(outcome, Path(job.directory), trial) for trial in job.batch] or [outcome]


def run_locally(
    jobs: list[TrialJob], workers: int, started: Started, finished: Finished, gpus: Sequence[str] = ()
) -> None:
    """`workers` trials at a time, each in its own process, and, given `gpus`, each on the one of
    them with the fewest trials (its `CUDA_VISIBLE_DEVICES`); Ctrl-C stops them all (they stop as an
    interrupted example does: checkpoint kept, resumable) and is raised again."""
    assignment = GpuAssignment(list(gpus)) if gpus else None
    processes: dict[str, subprocess.Popen] = {}
    lock = threading.Lock()
    stopping = threading.Event()

    reporting = threading.Lock()

    def one(job: TrialJob) -> None:
        """Run a trial and report it from this worker, before the worker takes its next trial (so
        the display never counts a finished trial as running beside its successor)."""
        outcomes = attempt(job)
        with reporting:
            for outcome in outcomes:
                finished(outcome)

    def attempt(job: TrialJob) -> list[TrialOutcome]:
        if stopping.is_set():
            return [TrialOutcome(trial_id, "interrupted", message="not started") for trial_id in job.ids]

        def on_start(process: subprocess.Popen) -> None:
            with lock:
                processes[job.trial_id] = process
            for trial_id in job.ids:
                started(trial_id)
            if stopping.is_set():
                _interrupt(process)

        gpu = assignment.take() if assignment is not None else None
        environment = {"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else None
        try:
            return run_job(job, environment=environment, on_start=on_start)
        finally:
            with lock:
                processes.pop(job.trial_id, None)
            if assignment is not None and gpu is not None:
                assignment.give_back(gpu)

    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="trial")
    pending = {pool.submit(one, job) for job in jobs}
    try:
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                future.result()  # a worker's own error, if any
    except KeyboardInterrupt:
        stopping.set()
        with lock:
            for process in processes.values():
                _interrupt(process)
        for future in pending:
            future.cancel()
        for future in pending:
            if not future.cancelled():
                future.result()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _interrupt(process: subprocess.Popen) -> None:
    """What Ctrl-C does to an example run in a terminal; after a grace period, a kill."""
    try:
        os.killpg(process.pid, signal.SIGINT)
    except ProcessLookupError:
        return

    def kill_later() -> None:
        try:
            process.wait(timeout=INTERRUPT_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()

    threading.Thread(target=kill_later, daemon=True).start()


def run_on_ray(
    jobs: list[TrialJob],
    address: str,
    *,
    cpus_per_trial: float,
    gpus_per_trial: float,
    started: Started,
    finished: Finished,
) -> None:
    """Each trial as a Ray task with its resources. A task whose worker or node dies is retried by
    Ray and resumes from the trial's checkpoint (the log folder must be on storage every node sees)."""

    ray = connect(address)
    task = ray.remote(num_cpus=cpus_per_trial, num_gpus=gpus_per_trial, max_retries=3)(_ray_trial)
    refs = {task.remote(job): job for job in jobs}
    for job in jobs:
        for trial_id in job.ids:
            started(trial_id)  # submitted: Ray starts it when its resources are free
    try:
        while refs:
            done, _ = ray.wait(list(refs), num_returns=1)
            for ref in done:
                refs.pop(ref)
                for outcome in ray.get(ref):
                    finished(outcome)
    except KeyboardInterrupt:
        for ref in refs:
            ray.cancel(ref, force=True)  # the trials' processes end with their workers; checkpoints stay
        raise


def _ray_trial(job: TrialJob) -> list[TrialOutcome]:
    return run_job(job)
