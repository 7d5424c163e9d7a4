"""Reading this process's Linux control groups, where containers and clusters set its CPU and
memory limits (Docker's `--cpus` / `--memory`, Kubernetes limits, systemd slices).

A limit can sit on the process's own cgroup or on any ancestor, in the unified (v2) hierarchy or in
a v1 controller's; inside a container the mount's root is often the container's own cgroup while
/proc/self/cgroup still names the host's path. `cgroup_folders` lists every folder whose limits
apply, so callers take the tightest one.
"""

from __future__ import annotations

from pathlib import Path

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
