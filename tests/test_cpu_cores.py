"""How many cores a run plans for: affinity, cgroup CPU quotas (v2 and v1, in and out of
containers), and the cores other processes keep busy."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from offline_rl.core import resources as cpu_cores
from offline_rl.core.resources import affinity_cores, busy_cores, cpu_quota, quota_cores


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _membership(tmp_path: Path, text: str) -> Path:
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(text)
    return proc


def test_a_v2_quota_is_read_from_the_processs_cgroup(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    _write(root / "kubepods.slice" / "pod1" / "cpu.max", "250000 100000\n")
    proc = _membership(tmp_path, "0::/kubepods.slice/pod1\n")
    assert cpu_quota(root, proc) == 2.5


def test_the_tightest_quota_of_the_cgroup_and_its_ancestors_applies(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    _write(root / "outer" / "cpu.max", "150000 100000\n")
    _write(root / "outer" / "inner" / "cpu.max", "max 100000\n")
    proc = _membership(tmp_path, "0::/outer/inner\n")
    assert cpu_quota(root, proc) == 1.5


def test_inside_a_container_the_mounts_root_is_the_containers_cgroup(tmp_path: Path) -> None:
    """Without a cgroup namespace /proc/self/cgroup names the host's path, which the container's
    mount does not have: the quota is read at the mount's root."""
    root = tmp_path / "cgroup"
    _write(root / "cpu.max", "200000 100000\n")
    proc = _membership(tmp_path, "0::/system.slice/docker-0123abcd.scope\n")
    assert cpu_quota(root, proc) == 2.0


def test_a_v1_quota_is_read_from_the_cpu_controller(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    _write(root / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_quota_us", "400000\n")
    _write(root / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_period_us", "100000\n")
    proc = _membership(tmp_path, "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n")
    assert cpu_quota(root, proc) == 4.0


@pytest.mark.parametrize(
    "files",
    [
        {"cpu.max": "max 100000\n"},  # v2, no limit
        {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"},  # v1, no limit
        {"cpu.max": "garbage\n"},
        {},
    ],
)
def test_no_quota_or_an_unreadable_one_is_none(tmp_path: Path, files: dict[str, str]) -> None:
    root = tmp_path / "cgroup"
    root.mkdir()
    for name, text in files.items():
        _write(root / name, text)
    proc = _membership(tmp_path, "4:cpu,cpuacct:/\n0::/\n")
    assert cpu_quota(root, proc) is None
    assert cpu_quota(root, tmp_path / "missing") is None


def test_a_quota_becomes_the_whole_cores_it_keeps_busy() -> None:
    assert [quota_cores(q) for q in (0.5, 1.0, 1.5, 2.0, 7.99, 3.0000000001)] == [1, 1, 1, 2, 7, 3]


def test_a_quota_narrower_than_the_affinity_sets_the_cores_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_cores, "affinity_cores", lambda: set(range(64)))
    monkeypatch.setattr(cpu_cores, "cpu_quota", lambda: 2.0)
    assert cpu_cores.core_budget() == (2, "a CPU quota of 2 cores (cgroup) on 64 cores")
    assert cpu_cores.available_cores() == 2
    monkeypatch.setattr(cpu_cores, "cpu_quota", lambda: 100.0)
    assert cpu_cores.core_budget() == (64, None)
    monkeypatch.setattr(cpu_cores, "cpu_quota", lambda: None)
    assert cpu_cores.available_cores() == 64


@pytest.mark.parametrize(
    ("requested", "load", "expected"), [(0, 0.2, 2), (0, 1.1, 1), (0, 6.0, 1), (2, 6.0, 2), (1, 0.0, 1)]
)
def test_cpu_threads_leave_busy_cores_alone(
    requested: int, load: float, expected: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from offline_rl.runs import session
    from offline_rl.runs.session import cpu_threads

    monkeypatch.setattr(session, "core_budget", lambda: (2, None))
    monkeypatch.setattr(session, "busy_cores", lambda: load)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    threads, why = cpu_threads(requested)
    assert threads == expected and why


@pytest.mark.parametrize(
    ("variable", "threads", "why"), [("1", 1, "OMP_NUM_THREADS;"), ("0", 2, "all"), ("x", 2, "all")]
)
def test_a_positive_omp_num_threads_caps_the_threads_as_torch_itself_would(
    variable: str, threads: int, why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job scheduler (or the user) that sets OMP_NUM_THREADS is followed, unless --threads says otherwise."""
    from offline_rl.runs import session
    from offline_rl.runs.session import cpu_threads

    monkeypatch.setattr(session, "core_budget", lambda: (2, None))
    monkeypatch.setattr(session, "busy_cores", lambda: 0.0)
    monkeypatch.setenv("OMP_NUM_THREADS", variable)
    chosen, reason = cpu_threads(0)
    assert (chosen, reason.split()[0]) == (threads, why)
    assert cpu_threads(2) == (2, "--threads, or the count of the run being resumed")


def test_cpu_threads_under_a_quota_take_the_quota_not_the_hosts_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's load says nothing about a quota's budget (other tenants run on other cores)."""
    from offline_rl.runs import session
    from offline_rl.runs.session import cpu_threads

    monkeypatch.setattr(session, "core_budget", lambda: (2, "a CPU quota of 2 cores (cgroup) on 64 cores"))
    monkeypatch.setattr(session, "busy_cores", lambda: 60.0)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert cpu_threads(0) == (2, "a CPU quota of 2 cores (cgroup) on 64 cores; --threads to choose")


def test_busy_cores_counts_only_this_processs_cores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy core outside the affinity (another job's cpuset) does not count."""
    stat = tmp_path / "stat"
    before = "cpu  0 0 0 0\ncpu0 100 0 0 100 0\ncpu1 100 0 0 100 0\ncpu2 100 0 0 100 0\nintr 5\n"
    after = "cpu  0 0 0 0\ncpu0 200 0 0 100 0\ncpu1 150 0 0 150 0\ncpu2 100 0 0 200 0\nintr 9\n"
    stat.write_text(before)
    monkeypatch.setattr(cpu_cores, "affinity_cores", lambda: {1, 2})
    monkeypatch.setattr(cpu_cores.time, "sleep", lambda seconds: stat.write_text(after))
    assert busy_cores(stat=stat) == pytest.approx(0.5)  # cpu1 half busy, cpu2 idle; cpu0 is not ours


def test_busy_cores_sees_a_busy_process() -> None:
    cores = len(affinity_cores())
    quiet = busy_cores()
    spinner = multiprocessing.get_context("spawn").Process(target=_spin, daemon=True)
    spinner.start()
    try:
        loaded = busy_cores(window_s=0.5)
    finally:
        spinner.terminate()
    assert 0.0 <= quiet <= cores and loaded >= 0.7  # one core spinning


def _spin() -> None:
    while True:
        pass


def test_more_threads_than_cores_is_one_line_before_any_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--threads 100000` used to build its threads until memory ran out (a MemoryError traceback)."""
    from offline_rl.core.errors import OfflineRLError
    from offline_rl.runs import session
    from offline_rl.runs.session import cpu_threads

    monkeypatch.setattr(session, "core_budget", lambda: (2, None))
    monkeypatch.setenv("OMP_NUM_THREADS", "64")  # a variable set for a bigger machine: the cores still cap it
    monkeypatch.setattr(session, "busy_cores", lambda: 0.0)
    assert cpu_threads(0)[0] == 2
    with pytest.raises(OfflineRLError, match=r"^--threads 100000: more than the 2 cores this process may use"):
        cpu_threads(100000)


def test_runs_started_together_share_the_cores_through_the_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs started together all saw every core free and each took them all, and all of them crawled:
    each registers before it chooses and sees the others."""
    import subprocess
    import sys

    from offline_rl.core.files import host_name
    from offline_rl.core.resources import RunRegistry
    from offline_rl.runs import session
    from offline_rl.runs.session import cpu_threads

    monkeypatch.setattr(session, "core_budget", lambda: (4, None))
    monkeypatch.setattr(session, "busy_cores", lambda: 0.0)  # none trains yet: the load shows nothing
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    registry = RunRegistry(tmp_path)
    registry.register()
    others = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]) for _ in range(2)]
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    try:
        for process in others:  # two runs choosing their threads now
            (tmp_path / f"{host_name()}-{process.pid}.json").write_text('{"threads": 0}')
        (tmp_path / f"{host_name()}-{int(ended.stdout)}.json").write_text('{"threads": 4}')  # a run that ended
        assert cpu_threads(0, registry.others) == (1, "shared with 2 other runs on these 4 cores; --threads to choose")
        assert not (tmp_path / f"{host_name()}-{int(ended.stdout)}.json").exists()
        (tmp_path / f"{host_name()}-{others[0].pid}.json").write_text('{"threads": 2}')  # one chose 2 of the 4
        (tmp_path / f"{host_name()}-{others[1].pid}.json").unlink()
        assert cpu_threads(0, registry.others)[0] == 2
        assert cpu_threads(0, list) == (4, "all 4 cores are free; --threads to choose")  # alone
    finally:
        for process in others:
            process.kill()
        registry.unregister()
    assert [path.name for path in tmp_path.iterdir()] == [f"{host_name()}-{others[0].pid}.json"]
