"""Settings that the converters writing frame-pool buffers (RL Unplugged shards, DQN Replay
checkpoints) declare alike, and how they resolve where they run."""

from __future__ import annotations

import os
from typing import Any

from offline_rl.cpu_cores import available_cores
from offline_rl.settings import setting

FRAME_COMPRESSIONS = (None, "gzip", "lzf")


def frame_compression() -> Any:
    """`--compression`: HDF5's filter for the buffer's frames. Off by default: compressed frames are
    inflated again at every training start that loads them, uncompressed ones only read."""
    return setting(None, "compress the buffer's frames: gzip or lzf (none: uncompressed)", choices=FRAME_COMPRESSIONS)


def conversion_workers(items: str) -> Any:
    """`--workers`: conversion is CPU-bound Python, one process per core keeps every core busy."""
    return setting(None, f"{items} converted in parallel (none: one per core, at most one per {items[:-1]})", minimum=1)


def conversion_ray_address() -> Any:
    """`--ray-address`: hand the conversions to a Ray cluster instead of this machine's processes."""
    return setting(
        None, "convert as Ray tasks: auto, ray://HOST:PORT, or local (none: $RAY_ADDRESS; without: --workers here)"
    )


def ray_cluster(address: str | None) -> str | None:
    """The Ray cluster to use: the flag, else $RAY_ADDRESS (as Ray's own clients read it), else none."""
    return address or os.environ.get("RAY_ADDRESS") or None


def worker_count(workers: int | None, jobs: int) -> int:
    return workers or max(1, min(jobs, available_cores()))
