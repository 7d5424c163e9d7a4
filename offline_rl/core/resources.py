"""The resources a process may use: its CPU cores, its memory, and how its allocator keeps memory.

Containers and clusters narrow a machine through the CPU affinity and Linux control groups (Docker's
`--cpus` / `--memory`, Kubernetes limits, Slurm's cpusets), which `os.cpu_count()` does not see. A
limit can sit on the process's own cgroup or on any ancestor, in the v2 hierarchy or a v1 controller's;
the tightest applies. Training threads, evaluation subprocesses, a sweep's trials and conversion workers
are all sized from `available_cores()`: torch's threads spin while they wait for each other, so more
threads than the quota allows are throttled together.

A load larger than `available_memory()` would end with the OOM killer's silent "Killed" minutes in, so
loaders compare first and refuse in one line. The figure is generous on purpose (reclaimable page cache
and free swap count), so a refusal means the load could not have finished.

Runs started together on one machine would each see the cores free and each take them all. Every run
registers in a small folder of running processes (`RunRegistry`: one file per process, written whole
by its owner only, read by the others; no lock), so that one choosing its threads shares the cores
with the runs already there or starting beside it.

`tune_cpu_allocator` keeps freed memory inside glibc's heap instead of returning it to the kernel: a
CPU update allocates and frees activation tensors of several MB, each otherwise a fresh `mmap` with
page faults and zeroing. Results are bit-identical; it is a no-op where glibc is not the allocator.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import functools
import json
import math
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from offline_rl.core.errors import OfflineRLError
from offline_rl.core.files import host_name, process_alive, write_json

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def cgroup_folders(v1_controller: str, root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> list[Path]:
    """This process's cgroup folders and their ancestors up to each mount's root, those that exist:
    in the v2 hierarchy, and in the v1 hierarchy holding `v1_controller` ("cpu", "memory").
    Empty where cgroups cannot be read."""
    try:
        memberships = proc_cgroup.read_text(encoding="ascii").splitlines()
    except OSError:
        return []
    folders: list[Path] = []
    for line in memberships:
        hierarchy, controllers, path = [*line.split(":", 2), "", ""][:3]
        if hierarchy == "0" and controllers == "":
            folders += _levels(root, path)
        elif v1_controller in controllers.split(","):
            for mount in _v1_mounts(root, v1_controller):
                folders += _levels(mount, path)
    return folders


def _v1_mounts(root: Path, controller: str) -> list[Path]:
    try:
        return sorted(entry for entry in root.iterdir() if controller in entry.name.split(",") and entry.is_dir())
    except OSError:
        return []


def _levels(mount: Path, path: str) -> list[Path]:
    parts = [part for part in path.strip().split("/") if part]
    candidates = [mount.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]
    return [folder for folder in candidates if folder.is_dir()]


def read_number(path: Path) -> int | None:
    """An integer file's value; None when it is missing, unreadable or not a number ("max")."""
    try:
        return int(path.read_text(encoding="ascii").split()[0])
    except (OSError, ValueError, IndexError):
        return None


def read_stat(path: Path, key: str) -> int | None:
    """One `key value` line of a stat file (memory.stat, cpu.stat)."""
    try:
        for line in path.read_text(encoding="ascii").splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        return None
    return None


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


PROC_MEMINFO = Path("/proc/meminfo")
_UNLIMITED = 2**62  # cgroup v1 writes "no limit" as a number near 2**63


def available_memory(
    meminfo: Path = PROC_MEMINFO, root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP
) -> tuple[int, str] | None:
    """(bytes, what limits them): the machine's MemAvailable plus free swap, or the room left under a
    cgroup memory limit (the limit minus what its processes hold, page cache excluded), whichever
    is smaller. None where neither can be read (not Linux)."""
    options = []
    machine = _machine_available(meminfo)
    if machine is not None:
        options.append((machine, "MemAvailable + SwapFree"))
    for folder in cgroup_folders("memory", root, proc_cgroup):
        room = _cgroup_room(folder)
        if room is not None:
            options.append((room, f"the memory limit of cgroup {folder}"))
    return min(options, key=lambda option: option[0]) if options else None


def _machine_available(meminfo: Path) -> int | None:
    try:
        fields = dict(line.split(":", 1) for line in meminfo.read_text(encoding="ascii").splitlines() if ":" in line)
        available = int(fields["MemAvailable"].split()[0]) + int(fields.get("SwapFree", "0 kB").split()[0])
    except (OSError, KeyError, ValueError, IndexError):
        return None
    return available * 1024


def _cgroup_room(folder: Path) -> int | None:
    limit = read_number(folder / "memory.max")  # v2 ("max": no limit)
    if limit is not None:
        used, cache = read_number(folder / "memory.current"), read_stat(folder / "memory.stat", "file")
    else:
        limit = read_number(folder / "memory.limit_in_bytes")  # v1
        used, cache = read_number(folder / "memory.usage_in_bytes"), read_stat(folder / "memory.stat", "total_cache")
    if limit is None or limit >= _UNLIMITED or used is None:
        return None
    return max(0, limit - (used - (cache or 0)))


def require_memory(need: int, subject: str, advice: str) -> None:
    """Refuse, in one line, work that needs more memory than the process may still take: `subject`
    ("x.hdf5: loading", "--buffer-size 1000000: the replay") needs N GiB, M are available; `advice`."""
    available = available_memory()
    if available is not None and need > available[0]:
        raise OfflineRLError(
            f"{subject} needs {describe_bytes(need)} of memory and {describe_bytes(available[0])} are "
            f"available ({available[1]}); {advice}"
        )


def describe_bytes(count: float) -> str:
    """Bytes for a message: GiB with one decimal (MiB below 1 GiB)."""
    return f"{count / 2**30:.1f} GiB" if count >= 2**30 else f"{count / 2**20:.0f} MiB"


_M_TRIM_THRESHOLD = -1

_M_TOP_PAD = -2

_M_MMAP_THRESHOLD = -3


@functools.cache
def tune_cpu_allocator() -> bool:
    """Raise glibc's mmap/trim thresholds for this process; True if glibc accepted them."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    accepted = [
        mallopt(_M_MMAP_THRESHOLD, 32 * 1024 * 1024),  # glibc's maximum on 64-bit
        mallopt(_M_TRIM_THRESHOLD, 1 << 30),
        mallopt(_M_TOP_PAD, 64 * 1024 * 1024),
    ]
    return all(accepted)


@dataclass
class RunRegistry:
    """The training processes running on this host, one `<host>-<pid>.json` file each in `folder`
    holding the torch threads it uses (0 while it is choosing). Files of processes that ended (however
    they ended) are ignored and removed by whoever reads them."""

    folder: Path
    _registered: bool = False

    @classmethod
    def default(cls) -> RunRegistry:
        return cls(Path(tempfile.gettempdir()) / f"offline_rl-runs-{os.getuid()}")

    def _own(self) -> Path:
        return self.folder / f"{host_name()}-{os.getpid()}.json"

    def register(self, threads: int = 0) -> None:
        """Record this process with `threads` (0: still choosing); removed when the process exits."""
        with contextlib.suppress(OSError, OfflineRLError):  # a registry not written only loses the sharing
            write_json(self._own(), {"threads": threads})
        if not self._registered:
            self._registered = True
            atexit.register(self.unregister)

    def unregister(self) -> None:
        with contextlib.suppress(OSError):
            self._own().unlink()

    def others(self) -> list[int]:
        """The threads of every other registered process of this host that still runs (0: choosing)."""
        found = []
        for path in self.folder.glob(f"{host_name()}-*.json"):
            pid = re.fullmatch(rf"{re.escape(host_name())}-(\d+)\.json", path.name)
            if pid is None or int(pid.group(1)) == os.getpid():
                continue
            if not process_alive(int(pid.group(1))):
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            try:
                found.append(int(json.loads(path.read_text())["threads"]))
            except (OSError, ValueError, KeyError, TypeError):
                found.append(0)
        return found


def share_of_cores(cores: int, others: list[int]) -> int:
    """This run's share of `cores` beside the `others` (their threads; 0: choosing now, as this run
    is): what the runs that chose left, divided among those choosing."""
    left = cores - sum(others)
    return max(1, left // (1 + others.count(0)))
