"""Outputs appear complete or not at all, with the permissions of any tool's output."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from offline_rl.atomic import atomic_path


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
