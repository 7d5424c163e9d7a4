"""Outputs appear complete or not at all, with the permissions of any tool's output."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import forked
from offline_rl.core.errors import OfflineRLError
from offline_rl.core.files import atomic_path, check_output, full_disk_errno


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_outputs_follow_the_umask(tmp_path: Path, umask: int) -> None:
    before = os.umask(umask)
    try:
        with atomic_path(tmp_path / "out.hdf5") as tmp:
            tmp.write_bytes(b"data")
    finally:
        os.umask(before)
    assert stat.S_IMODE((tmp_path / "out.hdf5").stat().st_mode) == 0o666 & ~umask


def test_an_interrupted_write_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt), atomic_path(tmp_path / "out.hdf5") as tmp:
        tmp.write_bytes(b"half")
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


# --- outputs checked before the work that produces them ---------------------------------------------


def test_a_stop_right_after_the_temporary_file_is_made_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    """Ctrl-C, or a SIGTERM a converter passes on to its workers, can land just after the temporary file
    appears on disk. Made before the cleanup's `try`, it was left behind there (a flaky sweep of a
    parallel conversion's SIGTERM test found it)."""
    open_file = os.open

    def stopped_once_made(path, *args, **kwargs):
        descriptor = open_file(path, *args, **kwargs)
        if str(path).endswith(".part"):
            os.close(descriptor)
            raise KeyboardInterrupt  # the signal's handler, run as soon as the file exists
        return descriptor

    monkeypatch.setattr(os, "open", stopped_once_made)
    with pytest.raises(KeyboardInterrupt), atomic_path(tmp_path / "out.hdf5"):
        pass
    assert list(tmp_path.iterdir()) == []


def test_check_output_names_the_flag_and_what_is_wrong(tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "a_folder").mkdir()
    cases = {
        "is a folder; expected a file name": dict(path=tmp_path / "a_folder"),
        "is a file; expected a folder": dict(path=tmp_path / "a_file", directory=True),
        "already exists (pass --overwrite": dict(path=tmp_path / "a_file", overwrite=False),
        f"{tmp_path / 'a_file'} is a file, not a folder": dict(path=tmp_path / "a_file" / "deeper" / "out.hdf5"),
    }
    for expected, arguments in cases.items():
        with pytest.raises(OfflineRLError) as caught:
            check_output(flag="--output", **arguments)  # type: ignore[arg-type]
        assert str(caught.value).startswith(f"--output {arguments['path']}: ") and expected in str(caught.value)


def test_check_output_makes_the_folder_and_leaves_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "kept.hdf5").write_text("x")
    assert check_output(tmp_path / "kept.hdf5", flag="--output") == tmp_path / "kept.hdf5"  # reused, not refused
    assert check_output(tmp_path / "kept.hdf5", flag="--output", overwrite=True) == tmp_path / "kept.hdf5"
    check_output(tmp_path / "new" / "deeper" / "out.hdf5", flag="--output", overwrite=False)
    check_output(tmp_path / "logs", flag="--logdir", directory=True)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "kept.hdf5",
        "logs",
        "new",
        "new/deeper",
    ]


def test_a_folder_that_cannot_be_written_is_one_line_with_the_reason(tmp_path: Path, monkeypatch) -> None:
    # As root (CI), permissions do not refuse a write; the refusal is what creating the probe file would raise.
    open_file = os.open

    def refused(path, *args, **kwargs):
        if ".write-check." in str(path):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        return open_file(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refused)
    with pytest.raises(OfflineRLError, match=r"^--logdir .*: cannot write in .* \(Permission denied\)$"):
        check_output(tmp_path / "log", flag="--logdir", directory=True)


# --- a disk that fills up while a file is written ---------------------------------------------------

_FILL_THE_DISK = """
import resource, signal, sys
import numpy as np
from offline_rl.core.errors import OfflineRLError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the limit then fails the write with EFBIG, as a full disk does
resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, resource.RLIM_INFINITY))
data = np.random.default_rng(0).random(600_000).astype(np.float32)  # 2.4 MB, LZF cannot shrink it
try:
    {write}
except OfflineRLError as error:
    print("one line:", error)
"""


@pytest.mark.parametrize(
    "write",
    [
        "from offline_rl.core.files import atomic_hdf5\n"
        "    with atomic_hdf5(sys.argv[1]) as file:\n"
        "        file.create_dataset('x', data=data, compression='lzf', chunks=(50_000,))",
        "from tianshou.data import Batch, ReplayBuffer\n"
        "    from offline_rl.core.compat import mark_buffer_full\n"
        "    from offline_rl.data import save_buffer\n"
        "    obs, flags = data.reshape(-1, 4), np.zeros(len(data) // 4, dtype=bool)\n"
        "    buffer = ReplayBuffer(len(obs))\n"
        "    buffer.set_batch(Batch(obs=obs, act=flags.astype(np.int64), rew=flags.astype(np.float32),"
        " terminated=flags, truncated=flags, done=flags, obs_next=obs, info=Batch()))\n"
        "    mark_buffer_full(buffer, len(obs))\n"
        "    save_buffer(buffer, sys.argv[1], compression='gzip')",
    ],
    ids=["atomic_hdf5", "save_buffer"],
)
def test_a_full_disk_is_one_line_not_a_crash(tmp_path: Path, write: str) -> None:
    """HDF5 with its chunk cache on crashes the process when the disk fills (h5py issue #914); a file
    size limit stands in for a full disk, which a test cannot make without mounting one."""
    script = _FILL_THE_DISK.format(write=write)
    output = tmp_path / "out.hdf5"
    result = forked.run([sys.executable, "-c", script, str(output)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == f"one line: {output}: not written, File too large (nothing partial was left)"
    assert list(tmp_path.iterdir()) == []


def test_a_file_size_limit_striking_torch_save_is_one_line(tmp_path: Path) -> None:
    """torch.save reports the failed write as "unexpected pos ..." without its errno; Python ignores
    SIGXFSZ, so the limit fails the write rather than ending the process."""
    import resource

    import torch

    from offline_rl.runs.checkpoint import save_checkpoint

    output = tmp_path / "checkpoint.pth"
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, limits[1]))
    try:
        with pytest.raises(OfflineRLError) as refused:
            save_checkpoint(output, torch.nn.Linear(600, 1000))  # 2.4 MB
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
    assert str(refused.value) == f"{output}: not written, File too large (nothing partial was left)"
    assert list(tmp_path.iterdir()) == []


def test_hdf5s_errno_is_read_from_its_message() -> None:
    message = "Can't decrement id ref count (file write failed: ..., errno = 28, error message = 'No space left')"
    assert full_disk_errno(RuntimeError(message)) == errno.ENOSPC
    assert full_disk_errno(OSError(errno.EDQUOT, "Disk quota exceeded")) == errno.EDQUOT
    assert full_disk_errno(RuntimeError("errno = 2")) is None
    assert full_disk_errno(ValueError("errno = 28")) is None


def test_a_writer_that_loses_the_errno_on_a_full_disk_is_still_one_line(tmp_path: Path, monkeypatch) -> None:
    """torch.save on a full disk raises "unexpected pos ..." with no errno: the free space decides."""
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")

    def fail(name: str) -> None:
        with atomic_path(tmp_path / name) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1621696 vs 1621584")

    monkeypatch.setattr(shutil, "disk_usage", lambda folder: usage(2 << 20, (2 << 20) - 4096, 4096))
    with pytest.raises(OfflineRLError, match=r"checkpoint\.pth: not written, No space left on device"):
        fail("checkpoint.pth")
    monkeypatch.setattr(shutil, "disk_usage", lambda folder: usage(1 << 40, 1 << 30, 1 << 39))
    with pytest.raises(RuntimeError, match="unexpected pos"):  # room to spare: not the disk, keep the traceback
        fail("other.pth")
    assert list(tmp_path.iterdir()) == []


def test_a_folder_that_appears_whole_is_not_made_and_an_empty_one_is_not_an_output(tmp_path: Path) -> None:
    dataset = tmp_path / "deeper" / "dataset"
    assert check_output(dataset, flag="--output", overwrite=False, directory=True, appears_whole=True) == dataset
    assert not dataset.exists() and dataset.parent.is_dir()  # its parent is probed, its own path left free
    dataset.mkdir()
    check_output(dataset, flag="--output", overwrite=False, directory=True, appears_whole=True)  # empty: nothing lost
    (dataset / "data").mkdir()
    with pytest.raises(OfflineRLError, match="already exists"):
        check_output(dataset, flag="--output", overwrite=False, directory=True, appears_whole=True)


# --- what a killed writer leaves ---------------------------------------------------------------------

_KILLED_MID_WRITE = """
import os, signal, sys
from offline_rl.core.files import atomic_path
with atomic_path(sys.argv[1]) as tmp:
    tmp.write_bytes(b"half of it")
    os.kill(os.getpid(), signal.SIGKILL)  # no clean-up runs: the temporary file stays
"""


def test_the_next_write_removes_what_a_killed_writer_left_and_only_that(tmp_path: Path) -> None:
    from offline_rl.core.files import host_name

    output = tmp_path / "checkpoint.pth"
    killed = subprocess.run([sys.executable, "-c", _KILLED_MID_WRITE, str(output)], capture_output=True, timeout=120)
    assert killed.returncode == -9
    (left,) = tmp_path.iterdir()
    assert left.name.startswith(".checkpoint.pth.") and left.name.endswith(".part")
    living = tmp_path / f".checkpoint.pth.{host_name()}-{os.getpid()}.0123456789abcdef.part"  # a writer still at work
    elsewhere = tmp_path / ".checkpoint.pth.another-host-1.0123456789abcdef.part"  # a shared folder's other host
    other_output = tmp_path / f".policy.pth.{host_name()}-{_ended_process()}.0123456789abcdef.part"
    for path in (living, elsewhere, other_output):
        path.write_bytes(b"x")
    with atomic_path(output) as tmp:
        tmp.write_bytes(b"whole")
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        ["checkpoint.pth", living.name, elsewhere.name, other_output.name]
    )
    assert output.read_bytes() == b"whole"


def _ended_process() -> int:
    """The id of a process that has ended."""
    process = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(process.stdout)


def test_a_full_disk_under_tensorboards_writer_is_one_line_naming_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """TensorBoard writes from its own thread: the disk's refusal printed that thread's traceback, and
    the run then failed with a line naming no file."""
    from tensorboard.summary.writer import record_writer
    from torch.utils.tensorboard import SummaryWriter

    from offline_rl.runs.event_writer import uninterrupted_writes

    writer = uninterrupted_writes(SummaryWriter(str(tmp_path / "run")))

    def refused(self, data: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(record_writer.RecordWriter, "write", refused)
    with pytest.raises(OfflineRLError) as caught:
        writer.add_scalar("eval/return_mean", 1.0, 0)
        writer.flush()
    assert str(caught.value) == f"{tmp_path / 'run'}: TensorBoard events not written, No space left on device"
    with pytest.raises(OfflineRLError):
        writer.close()  # the run's way out says the same
    assert "Traceback" not in capfd.readouterr().err
