"""Several training processes on one GPU, their kernels side by side: a CUDA MPS daemon of our own.

Processes sharing a GPU take turns: the driver gives each CUDA context its own time slices, so the
kernels of two runs never execute at the same moment, however few of the GPU's multiprocessors each
one fills. A run whose update replays as one CUDA graph keeps the GPU busy, which leaves the others
little: on an H100 four `d4rl_cql.py` runs together did 1.08x the updates of one. Through NVIDIA's
Multi-Process Service their kernels run at once, as one process's streams can: 1.60x (BENCHMARKS.md,
"Fourth H100 session"). The daemon started here is private: its pipe and log folders live in a folder
the caller owns, and only processes started with its variables in their environment connect to it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from offline_rl.errors import OfflineRLError

MPS_CONTROL = "nvidia-cuda-mps-control"
MPS_VARIABLES = ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")


@contextlib.contextmanager
def mps_daemon(folder: Path) -> Iterator[None]:
    """Start an MPS control daemon whose pipe and log folders are under `folder`, and put their
    variables in this process's environment, so that every process started inside the block shares
    the GPU through it; on the way out, whatever happened, ask it to quit and restore the environment.
    `folder` must have a short path: the daemon's sockets live in it."""
    control = shutil.which(MPS_CONTROL)
    if control is None:
        raise OfflineRLError(f"--mps: {MPS_CONTROL} is not on PATH (it comes with the NVIDIA driver's tools)")
    pipe, log = folder / "mps-pipe", folder / "mps-log"
    previous = {variable: os.environ.get(variable) for variable in MPS_VARIABLES}
    for variable, path in zip(MPS_VARIABLES, (pipe, log), strict=True):
        path.mkdir(parents=True, exist_ok=True)
        os.environ[variable] = str(path)
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
