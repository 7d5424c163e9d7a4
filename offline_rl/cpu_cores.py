"""The CPU cores this process may use, and how many of them other work keeps busy right now.

Two things narrow a machine's cores, and `os.cpu_count()` sees neither: the CPU affinity (taskset,
Slurm's cpusets, Docker's `--cpuset-cpus`) and a cgroup CPU quota (Docker's `--cpus`, Kubernetes
CPU limits), which lets a group of processes run `quota / period` cores' worth of time on any of
the machine's cores. A quota is the common case on clusters, and the costly one to miss: torch's
threads spin while they wait for each other, so 64 threads under a 2-core quota are throttled
together most of each period, and a sweep that counted 64 cores would start 32 trials at once.
Training threads, evaluation subprocesses, a sweep's trials and conversion workers are all sized
from `available_cores()`.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
PROC_STAT = Path("/proc/stat")


def affinity_cores() -> set[int]:
    """The cores this process may be scheduled on."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def cpu_quota(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> float | None:
    """Cores' worth of CPU time the cgroup quota allows this process (the tightest over its cgroup
    and their ancestors, cgroup v2 or v1); None without a quota or where cgroups cannot be read."""
    try:
        memberships = proc_cgroup.read_text(encoding="ascii").splitlines()
    except OSError:
        return None
    quotas = []
    for line in memberships:
        hierarchy, controllers, path = [*line.split(":", 2), "", ""][:3]
        if hierarchy == "0" and controllers == "":  # the unified (v2) hierarchy
            quotas += [_v2_quota(level) for level in _levels(root, path)]
        elif "cpu" in controllers.split(","):
            for mount in (root / "cpu", root / "cpu,cpuacct"):
                quotas += [_v1_quota(level) for level in _levels(mount, path)]
    found = [quota for quota in quotas if quota is not None]
    return min(found) if found else None


def _levels(mount: Path, path: str) -> list[Path]:
    """The process's cgroup folder under `mount` and every ancestor up to `mount`, those that exist.

    Inside a container the mount's root is often the container's own cgroup while `path` still
    names the host's view of it, so the root is always among them.
    """
    parts = [part for part in path.strip().split("/") if part]
    folders = [mount.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]
    return [folder for folder in folders if folder.is_dir()]


def _v2_quota(folder: Path) -> float | None:
    try:
        quota, period = (folder / "cpu.max").read_text(encoding="ascii").split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def _v1_quota(folder: Path) -> float | None:
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text(encoding="ascii"))
        period = int((folder / "cpu.cfs_period_us").read_text(encoding="ascii"))
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def quota_cores(quota: float) -> int:
    """Whole cores a quota keeps busy without throttling: rounded down (a spinning thread beyond the
    quota stalls the others), at least one."""
    return max(1, math.floor(quota + 1e-9))


def core_budget() -> tuple[int, str | None]:
    """Cores to plan work for (the affinity's, fewer where a cgroup quota allows fewer), and, when
    the quota is what limits them, a note saying so."""
    cores = len(affinity_cores())
    quota = cpu_quota()
    if quota is None or quota_cores(quota) >= cores:
        return cores, None
    unit = "core" if quota == 1 else "cores"
    return quota_cores(quota), f"a CPU quota of {quota:g} {unit} (cgroup) on {cores} cores"


def available_cores() -> int:
    """Cores to plan work for: the affinity's, fewer where a cgroup quota allows fewer."""
    return core_budget()[0]


def busy_cores(window_s: float = 0.3, *, stat: Path = PROC_STAT) -> float:
    """How many of this process's cores (its affinity) other processes keep busy now: their lines of
    /proc/stat sampled over `window_s` while this process sleeps; where /proc/stat cannot be read,
    the 1-minute load average, which lags behind."""
    mine = affinity_cores()

    def sample() -> dict[int, tuple[int, int]] | None:
        try:
            lines = stat.read_text(encoding="ascii").splitlines()
            per_core = {}
            for line in lines:
                name, *values = line.split()
                if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in mine:
                    fields = [int(value) for value in values]
                    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
                    per_core[int(name[3:])] = (sum(fields), idle)
        except (OSError, ValueError, IndexError):
            return None
        return per_core or None

    first = sample()
    if first is None:
        return min(float(len(mine)), os.getloadavg()[0]) if hasattr(os, "getloadavg") else 0.0
    time.sleep(window_s)
    second = sample() or {}
    busy = 0.0
    for core, (total_before, idle_before) in first.items():
        total_after, idle_after = second.get(core, (total_before, idle_before))
        total, idle = total_after - total_before, idle_after - idle_before
        busy += (total - idle) / total if total > 0 else 0.0
    return busy
