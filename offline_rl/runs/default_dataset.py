"""The random dataset a training run makes when given none: D4RL's random recipe for its task, made once
in a cache folder and reused by the runs after it (a sweep's trials started together make it once)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from offline_rl.core.errors import OfflineRLError
from offline_rl.core.files import FileLock, check_output
from offline_rl.runs.dataset_generation import CollectConfig, collect_dataset

log = logging.getLogger(__name__)


def cache_dir() -> Path:
    """Where generated default datasets live: `$OFFLINE_RL_CACHE_DIR`, else `~/.cache/offline_rl/datasets`."""
    override = os.environ.get("OFFLINE_RL_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "offline_rl" / "datasets"


def default_dataset_path(task: str, size: int, seed: int = 0) -> Path:
    """Cache path of the random-policy dataset generated for `task` when no dataset is given."""
    safe_task = task.replace("/", "_")
    return cache_dir() / f"{safe_task}-random-{size}-seed{seed}.hdf5"


def ensure_random_dataset(task: str, size: int, *, seed: int = 0, num_envs: int = 1) -> Path:
    """Return the cached random dataset for `task`, generating it (once) if it is not there yet.

    Runs started together (a sweep's trials) generate it once: the first takes the cache file's
    lock and generates, the others wait for it and then read its file."""
    path = default_dataset_path(task, size, seed)
    if path.exists() or not _generate_once(
        path, CollectConfig(task=task, output=path, size=size, seed=seed, num_envs=num_envs)
    ):
        log.info(f"no dataset given: using the cached random-policy dataset {path}")
    return path


def _generate_once(path: Path, config: CollectConfig) -> bool:
    """Generate the cached dataset at `path` under its lock; False when another run made it meanwhile."""
    try:
        check_output(path, flag="the dataset cache's file")
    except OfflineRLError as error:
        hint = "give --dataset, or set OFFLINE_RL_CACHE_DIR to a folder you can write"
        raise OfflineRLError(f"{error}; {hint}") from None
    lock = FileLock(path.with_name(f".{path.name}.lock"))
    lock.acquire_after(f"no dataset given: another run is generating {path}; waiting for it")
    try:
        if path.exists():
            return False
        log.info(
            f"no dataset given: generating a {config.size}-step random-policy dataset for {config.task} at {path} "
            "(reused next time)"
        )
        collect_dataset(config, size_flag="--dataset-size")
        return True
    finally:
        lock.release()
