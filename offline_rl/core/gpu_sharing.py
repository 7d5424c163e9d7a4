"""Several training processes on one GPU, their kernels side by side: a CUDA MPS daemon of our own.

Processes sharing a GPU take turns: the driver gives each CUDA context its own time slices, so the
kernels of two runs never execute at the same moment, however few of the GPU's multiprocessors each
one fills. A run whose update replays as one CUDA graph keeps the GPU busy, which leaves the others
little. Through NVIDIA's Multi-Process Service their kernels run at once, as one process's streams
can, and holding each client to a share of the multiprocessors lets them contend less and do more
together (the figures are on the docs' benchmark page). The daemon started here is private: its pipe
and log folders live in a folder the caller owns, and only processes started with its variables in
their environment connect to it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

from offline_rl.core.errors import OfflineRLError

MPS_CONTROL = "nvidia-cuda-mps-control"
MPS_VARIABLES = ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")
THREAD_PERCENTAGE_VARIABLE = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"


def default_thread_percentage(runs_per_gpu: int) -> int:
    """Each run's share of the multiprocessors, in percent, when `runs_per_gpu` share a GPU: enough
    for every multiprocessor to be open to two runs (200 / runs, at most 100): 50 for four runs, the
    best of the shares compared; one or two runs are not held back at all, since one alone trains
    fastest with the whole GPU."""
    return max(1, min(100, 200 // max(1, runs_per_gpu)))


def visible_gpus() -> list[str]:
    """The GPUs this process may hand to its children, as `CUDA_VISIBLE_DEVICES` entries: the ones
    that variable already names, in its order (CUDA stops at the first negative entry, so do we),
    or else every GPU `nvidia-smi` lists (none without the driver's tools). Asked without importing
    torch, which a sweep's parent process never needs."""
    named = os.environ.get("CUDA_VISIBLE_DEVICES")
    if named is not None:
        entries = []
        for entry in (part.strip() for part in named.split(",")):
            if not entry or entry.startswith("-"):
                break
            entries.append(entry)
        return entries
    if shutil.which("nvidia-smi") is None:
        return []
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False).stdout
    return [str(index) for index in range(sum(line.startswith("GPU ") for line in listed.splitlines()))]


class GpuAssignment:
    """Which GPU each of several concurrent runs gets: the one with the fewest runs so far (the first
    of them on a tie), so that 8 trials on 2 GPUs run 4 on each rather than all on the first, where
    every run's `--device auto` would otherwise put them. Thread-safe: a sweep's workers are threads."""

    def __init__(self, gpus: list[str]) -> None:
        self._running = dict.fromkeys(gpus, 0)
        self._lock = threading.Lock()

    def take(self) -> str:
        with self._lock:
            gpu = min(self._running, key=self._running.__getitem__)
            self._running[gpu] += 1
            return gpu

    def give_back(self, gpu: str) -> None:
        with self._lock:
            self._running[gpu] -= 1


def mps_control(thread_percentage: int) -> str:
    """The MPS control program's path, once the request is known to be possible: callers that start
    daemons later ask first, so that a machine without one fails before any work."""
    if not 1 <= thread_percentage <= 100:
        raise OfflineRLError(f"--mps-thread-percentage {thread_percentage}: expected a value in [1, 100]")
    control = shutil.which(MPS_CONTROL)
    if control is None:
        raise OfflineRLError(f"--mps: {MPS_CONTROL} is not on PATH (it comes with the NVIDIA driver's tools)")
    return control


@contextlib.contextmanager
def mps_daemon(folder: Path, thread_percentage: int) -> Iterator[None]:
    """Start an MPS control daemon whose pipe and log folders are under `folder`, and put their
    variables in this process's environment, so that every process started inside the block shares
    the GPU through it, each held to `thread_percentage` percent of its multiprocessors (100: no
    cap); on the way out, whatever happened, ask it to quit and restore the environment.
    `folder` must have a short path: the daemon's sockets live in it."""
    control = mps_control(thread_percentage)
    pipe, log = folder / "mps-pipe", folder / "mps-log"
    previous = {variable: os.environ.get(variable) for variable in (*MPS_VARIABLES, THREAD_PERCENTAGE_VARIABLE)}
    for variable, path in zip(MPS_VARIABLES, (pipe, log), strict=True):
        path.mkdir(parents=True, exist_ok=True)
        os.environ[variable] = str(path)
    os.environ[THREAD_PERCENTAGE_VARIABLE] = str(thread_percentage)  # the daemon's default and each client's
    try:
        started = subprocess.run([control, "-d"], capture_output=True, text=True, check=False)
        if started.returncode != 0:
            reason = (started.stderr or started.stdout).strip() or f"exit status {started.returncode}"
            raise OfflineRLError(f"--mps: {MPS_CONTROL} -d failed: {reason}")
        try:
            yield
        finally:
            subprocess.run([control], input="quit\n", text=True, capture_output=True, check=False)
    finally:
        for variable, value in previous.items():
            if value is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = value
