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

from offline_rl.cgroups import CGROUP_ROOT, PROC_CGROUP, cgroup_folders, read_number

PROC_STAT = Path("/proc/stat")


def affinity_cores() -> set[int]:
    """The cores this process may be scheduled on."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def cpu_quota(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> float | None:
    """Cores' worth of CPU time the cgroup quota allows this process (the tightest over its cgroups
    and their ancestors, v2 or v1); None without a quota or where cgroups cannot be read."""
    quotas = []
    for folder in cgroup_folders("cpu", root, proc_cgroup):
        try:  # v2: "max 100000" or "200000 100000"
            quota, period = (folder / "cpu.max").read_text(encoding="ascii").split()[:2]
            quotas.append(None if quota == "max" else int(quota) / int(period))
            continue
        except (OSError, ValueError):
            pass
        quota_us, period_us = read_number(folder / "cpu.cfs_quota_us"), read_number(folder / "cpu.cfs_period_us")
        if quota_us is not None and period_us and quota_us > 0:  # v1: -1 is no quota
            quotas.append(quota_us / period_us)
    found = [quota for quota in quotas if quota is not None]
    return min(found) if found else None


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


def cores_per_run(runs: int) -> int:
    """Each of `runs` concurrent processes' share of the available cores (at least one): the torch
    threads a sweep gives each trial, and a benchmark of concurrent runs each run."""
    return max(1, available_cores() // max(1, runs))


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
