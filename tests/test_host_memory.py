"""The memory a load may still take (the machine's, a cgroup limit's), and the one-line refusal of a
buffer that would not fit, instead of the OOM killer's silent "Killed" minutes into the load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import synthetic_frame_stack_buffer
from offline_rl.core.resources import available_memory, describe_bytes

MEMINFO = "MemTotal:       24684096 kB\nMemFree:  100 kB\nMemAvailable:   20000000 kB\nSwapFree:  1000000 kB\n"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _setup(tmp_path: Path, membership: str) -> tuple[Path, Path, Path]:
    meminfo, proc = tmp_path / "meminfo", tmp_path / "proc-self-cgroup"
    meminfo.write_text(MEMINFO)
    proc.write_text(membership)
    root = tmp_path / "cgroup"
    root.mkdir()
    return meminfo, root, proc


def test_the_machines_available_memory_and_free_swap_count(tmp_path: Path) -> None:
    meminfo, root, proc = _setup(tmp_path, "0::/\n")
    assert available_memory(meminfo, root, proc) == (21_000_000 * 1024, "MemAvailable + SwapFree")


def test_a_v2_limit_leaves_its_limit_minus_what_its_processes_hold_page_cache_excluded(tmp_path: Path) -> None:
    meminfo, root, proc = _setup(tmp_path, "0::/kubepods/pod1\n")
    pod = root / "kubepods" / "pod1"
    _write(pod / "memory.max", f"{8 * 2**30}\n")
    _write(pod / "memory.current", f"{3 * 2**30}\n")
    _write(pod / "memory.stat", f"anon {2 * 2**30}\nfile {2**30}\n")
    assert available_memory(meminfo, root, proc) == (6 * 2**30, f"the memory limit of cgroup {pod}")
    _write(pod / "memory.max", "max\n")
    assert available_memory(meminfo, root, proc)[1] == "MemAvailable + SwapFree"


def test_a_v1_limit_on_an_ancestor_applies_and_no_limit_is_a_huge_number(tmp_path: Path) -> None:
    meminfo, root, proc = _setup(tmp_path, "4:memory:/batch/job7\n0::/\n")
    batch, job = root / "memory" / "batch", root / "memory" / "batch" / "job7"
    _write(batch / "memory.limit_in_bytes", f"{4 * 2**30}\n")
    _write(batch / "memory.usage_in_bytes", f"{2 * 2**30}\n")
    _write(batch / "memory.stat", f"cache 0\ntotal_cache {2**30}\n")
    _write(job / "memory.limit_in_bytes", "9223372036854771712\n")
    _write(job / "memory.usage_in_bytes", "0\n")
    assert available_memory(meminfo, root, proc) == (3 * 2**30, f"the memory limit of cgroup {batch}")


def test_nothing_readable_is_no_answer(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    assert available_memory(missing, missing, missing) is None


def test_this_machine_has_an_answer_within_its_memory() -> None:
    answer = available_memory()
    assert answer is not None
    total_kb = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
    swap_kb = int(Path("/proc/meminfo").read_text().split("SwapTotal:")[1].split()[0])
    assert 0 < answer[0] <= (total_kb + swap_kb) * 1024


def test_sizes_read_as_a_person_would() -> None:
    assert [describe_bytes(b) for b in (5 * 2**20, 2**30, 7.58 * 2**30)] == ["5 MiB", "1.0 GiB", "7.6 GiB"]


def test_a_buffer_larger_than_the_memory_left_is_refused_before_loading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tianshou.data import Batch, ReplayBuffer

    from offline_rl.core import resources as host_memory
    from offline_rl.core.errors import OfflineRLError
    from offline_rl.data.buffers import _file_bytes, load_buffer, save_buffer

    buffer = ReplayBuffer(1000)
    for step in range(1000):
        buffer.add(
            Batch(obs=np.zeros(256, np.float32), act=0, rew=1.0, terminated=False, truncated=step % 100 == 99,
                  obs_next=np.zeros(256, np.float32), info={})
        )  # fmt: skip
    path = save_buffer(buffer, tmp_path / "big.hdf5")
    need = _file_bytes(path)
    assert need >= 2 * 1000 * 256 * 4  # obs and obs_next, as read
    monkeypatch.setattr(host_memory, "available_memory", lambda: (need - 1, "a test's limit"))
    with pytest.raises(OfflineRLError) as refused:
        load_buffer(path)
    assert str(refused.value) == (
        f"{path}: loading needs {describe_bytes(need)} of memory and {describe_bytes(need - 1)} are available "
        "(a test's limit); free memory, load fewer files, or use a machine with more"
    )
    monkeypatch.setattr(host_memory, "available_memory", lambda: (need, "a test's limit"))
    assert len(load_buffer(path)) == 1000


def test_several_collections_need_their_sum_plus_the_largest_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from offline_rl.core import resources as host_memory
    from offline_rl.core.errors import OfflineRLError
    from offline_rl.data.buffers import _file_bytes, load_buffers, save_buffer

    parts = {0: synthetic_frame_stack_buffer(300, 0), 1: synthetic_frame_stack_buffer(500, 1)}
    paths = [save_buffer(part, tmp_path / f"{seed}.hdf5") for seed, part in parts.items()]
    sizes = [_file_bytes(path) for path in paths]
    monkeypatch.setattr(host_memory, "available_memory", lambda: (sum(sizes) + max(sizes) - 1, "a test's limit"))
    with pytest.raises(OfflineRLError, match=rf"^{tmp_path}/{{0-1}}\.hdf5: loading needs"):
        load_buffers(paths)
    monkeypatch.setattr(host_memory, "available_memory", lambda: (sum(sizes) + max(sizes), "a test's limit"))
    assert len(load_buffers(paths)) == 800


@pytest.mark.parametrize("watch", [False, True])
def test_an_atari_replay_or_recording_that_cannot_fit_once_full_is_refused_at_the_start(
    watch: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Training fills its replay for hours; the OOM killer would end the run when it is nearly full."""
    from offline_rl.cli import atari_qrdqn
    from offline_rl.core import resources as host_memory
    from offline_rl.core.errors import OfflineRLError
    from offline_rl.envs.atari import make_discrete_env

    flags = ["--task", "PongNoFrameskip-v4", "--buffer-size", "100000", "--training-num", "10"]
    if watch:
        flags += ["--watch", "--save-buffer-name", "x.hdf5"]
    config = atari_qrdqn.config_from_args(flags)
    env = make_discrete_env(config.task, config.frames_stack)
    need = 100_000 * (84 * 84 + 19) * (1.1 if watch else 1.0)  # each frame once, + one env's share to merge
    monkeypatch.setattr(host_memory, "available_memory", lambda: (int(need) - 1, "a test's limit"))
    with pytest.raises(OfflineRLError, match=r"^--buffer-size 100000.* needs \d+ MiB of memory and .*smaller --buf"):
        atari_qrdqn.require_replay_memory(config, env)
    monkeypatch.setattr(host_memory, "available_memory", lambda: (int(need) + 1, "a test's limit"))
    atari_qrdqn.require_replay_memory(config, env)
    env.close()
