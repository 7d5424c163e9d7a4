"""Settings that the converters writing frame-pool buffers (RL Unplugged shards, DQN Replay
checkpoints) declare alike, and how they resolve where they run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from offline_rl.core.resources import available_cores
from offline_rl.core.settings import require, setting

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


def require_one_source(task: object, on_disk: object, output: object, *, on_disk_flag: str, picks: str) -> None:
    """Either a data set's names (`--task` with `picks`) or files on disk (`on_disk_flag`); `--output`
    only with the latter, since named data has its own place under `--buffer-dir`."""
    require((task is None) != (on_disk is None), f"give either --task (with {picks}) or {on_disk_flag}")
    require(
        task is None or output is None, f"--output goes with {on_disk_flag}; with --task, buffers go to --buffer-dir"
    )


def folder_or_default(given: Path | None, root: Path, name: str) -> Path:
    """A converter's folder: the flag's, else `root/name` (`~/.rl_unplugged/datasets`, ...), read when
    the command runs, so a changed HOME (a test's, a cluster job's) is honoured."""
    return (given or root / name).expanduser()
