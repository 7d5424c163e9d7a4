"""How much memory this process can still take before the kernel's OOM killer ends it.

A dataset larger than that does not fail cleanly: the process is killed mid-load ("Killed", exit
137) after minutes of reading, with nothing said. Loaders compare what a file will need with
`available_memory()` first and refuse in one line. The figure is generous on purpose (reclaimable
page cache and free swap count as available), so a refusal means the load could not have finished.
"""

from __future__ import annotations

from pathlib import Path

from offline_rl.cgroups import CGROUP_ROOT, PROC_CGROUP, cgroup_folders, read_number, read_stat
from offline_rl.errors import OfflineRLError

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
