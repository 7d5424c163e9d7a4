"""Downloads (`offline_rl.data.download`) from a real HTTP server on this machine: the bytes, the bars they
are counted on, a body cut short, and a host that cannot be reached."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from conftest import CUT_AFTER, paths_served, ranges_asked
from offline_rl.core.errors import DownloadError
from offline_rl.core.progress import Meter
from offline_rl.data.download import check_reachable, download_file


def served_file(folder: Path, name: str = "data.bin", size: int = 3 * (1 << 20) + 17) -> bytes:
    content = bytes(range(256)) * (size // 256) + bytes(size % 256)
    (folder / name).write_bytes(content)
    return content


def test_a_download_lands_whole_with_its_own_bar(http_server: tuple[str, Path], tmp_path: Path, capsys) -> None:
    root, served = http_server
    content = served_file(served)
    destination = tmp_path / "out" / "data.bin"
    destination.parent.mkdir()
    download_file(f"{root}/data.bin", destination)
    assert destination.read_bytes() == content
    assert [p.name for p in destination.parent.iterdir()] == ["data.bin"]  # no temporary left
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("download data.bin: 100%") and "3.15M/3.15M" in last


def test_a_download_counted_on_a_shared_meter_draws_no_bar(
    http_server: tuple[str, Path], tmp_path: Path, capsys
) -> None:
    """Worker processes count their downloads on the parent's one bar: the size once, then each chunk."""
    root, served = http_server
    content = served_file(served)
    grown: list[int] = []
    advanced: list[int] = []
    download_file(f"{root}/data.bin", tmp_path / "data.bin", meter=Meter(grow=grown.append, advance=advanced.append))
    assert (tmp_path / "data.bin").read_bytes() == content
    assert grown == [len(content)] and sum(advanced) == len(content) and len(advanced) == 4  # 1 MiB chunks
    assert capsys.readouterr().err == ""


def test_a_body_cut_short_is_an_error_and_the_next_run_asks_only_for_the_rest(
    http_server: tuple[str, Path], tmp_path: Path
) -> None:
    """The server announced more bytes than it sent: the file must not appear as if complete. What came
    is kept aside, and each run asks for what is still missing, of the same version of the file."""
    root, served = http_server
    content = served_file(served)
    destination = tmp_path / "data.bin"
    for run in (1, 2):
        with pytest.raises(DownloadError) as error:
            download_file(f"{root}/cut/data.bin", destination, hint="or set X_DIR")
        message = str(error.value)
        assert f"{root}/cut/data.bin" in message and str(destination) in message and "X_DIR" in message
        assert f"the connection closed after {run * CUT_AFTER} of its {len(content)} bytes" in message
        assert f"run again to resume from the {run * CUT_AFTER / 1e6:.1f} MB received" in message
        assert not destination.exists()
        assert (tmp_path / ".data.bin.partial").read_bytes() == content[: run * CUT_AFTER]
    assert ranges_asked() == [None, f"bytes={CUT_AFTER}-"]


def test_a_stopped_download_resumes_where_it_stopped(http_server: tuple[str, Path], tmp_path: Path) -> None:
    root, served = http_server
    content = served_file(served)
    destination = tmp_path / "data.bin"
    with pytest.raises(DownloadError):
        download_file(f"{root}/flaky/data.bin", destination)  # the first answer stops after CUT_AFTER bytes
    download_file(f"{root}/flaky/data.bin", destination)
    assert destination.read_bytes() == content
    assert ranges_asked() == [None, f"bytes={CUT_AFTER}-"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.bin", "served"]  # nothing kept aside any more


def test_ctrl_c_keeps_what_came_and_the_next_run_resumes(http_server: tuple[str, Path], tmp_path: Path, capsys) -> None:
    root, served = http_server
    content = served_file(served)
    destination = tmp_path / "data.bin"

    def interrupt_after_the_first_chunk(count: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        meter = Meter(grow=lambda _: None, advance=interrupt_after_the_first_chunk)
        download_file(f"{root}/data.bin", destination, meter=meter)
    assert capsys.readouterr().out == f"{destination}: download stopped after 1.0 MB; the next run resumes it\n"
    grown: list[int] = []
    advanced: list[int] = []
    download_file(f"{root}/data.bin", destination, meter=Meter(grow=grown.append, advance=advanced.append))
    assert destination.read_bytes() == content
    assert ranges_asked() == [None, f"bytes={1 << 20}-"]
    assert grown == [len(content)] and advanced[0] == 1 << 20 and sum(advanced) == len(content)  # the bar starts there


@pytest.mark.parametrize(
    ("server", "asked_again"),
    [
        ("flaky", []),  # `If-Range` with another version: the server sends the new one whole
        ("rangeonly", [None]),  # it sends the rest of the new one (its total tells): asked for whole
    ],
)
def test_a_file_changed_on_the_server_is_fetched_again_whole(
    server: str, asked_again: list[None], http_server: tuple[str, Path], tmp_path: Path
) -> None:
    """The kept bytes are of the old version (another ETag, another size): never the start of the new one."""
    root, served = http_server
    served_file(served)
    destination = tmp_path / "data.bin"
    with pytest.raises(DownloadError):
        download_file(f"{root}/{server}/data.bin", destination)
    changed = served_file(served, size=2 * (1 << 20) + 5)
    download_file(f"{root}/{server}/data.bin", destination)
    assert destination.read_bytes() == changed
    assert ranges_asked() == [None, f"bytes={CUT_AFTER}-", *asked_again]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.bin", "served"]


def test_a_missing_file_names_the_url_and_where_to_put_a_copy(http_server: tuple[str, Path], tmp_path: Path) -> None:
    root, _ = http_server
    with pytest.raises(DownloadError, match=r"download from .*/absent\.bin failed \(File not found\); copy the file"):
        download_file(f"{root}/absent.bin", tmp_path / "absent.bin")
    assert not (tmp_path / "absent.bin").exists()


def test_a_download_folder_that_is_a_file_is_one_line_before_any_request(
    http_server: tuple[str, Path], tmp_path: Path
) -> None:
    """A dataset-folder variable set to a file's path (D4RL_DATASET_DIR=~/data.hdf5) used to fail on the
    partial download's bytes with a NotADirectoryError."""
    root, served = http_server
    served_file(served)
    (tmp_path / "a-file").write_text("")
    for destination in (tmp_path / "a-file" / "data.bin", tmp_path / "a-file" / "sub" / "data.bin"):
        with pytest.raises(DownloadError, match=r"a-file is a file, not a folder; set X_DIR to a folder$"):
            download_file(f"{root}/data.bin", destination, hint="or set X_DIR")
    assert paths_served() == []


def test_an_unreachable_host_fails_before_any_download(http_server: tuple[str, Path], tmp_path: Path) -> None:
    """A closed port answers at once; the message is the one the download itself would give."""
    root, _ = http_server
    check_reachable(f"{root}/data.bin", tmp_path / "data.bin")  # up: nothing to say
    check_reachable((tmp_path / "mirror" / "data.bin").as_uri(), tmp_path / "data.bin")  # a folder: no host
    with pytest.raises(DownloadError) as error:
        check_reachable("http://127.0.0.1:9/mirror/data.bin", tmp_path / "data.bin", hint="or set X_DIR")
    message = str(error.value)
    assert message.startswith(f"dataset not found at {tmp_path / 'data.bin'} and the download from ")
    assert "http://127.0.0.1:9/mirror/data.bin failed (cannot reach 127.0.0.1:" in message
    assert message.endswith("copy the file to that path (or set X_DIR) and run again")


def test_processes_that_need_one_file_at_once_download_it_once(
    http_server: tuple[str, Path], tmp_path: Path, capsys
) -> None:
    """As a sweep's seeds of one dataset do when they start together: the second waits for the first's
    download, then finds the file, and the lock beside it is gone."""
    root, served = http_server
    content = served_file(served)
    destination = tmp_path / "data.bin"
    first = threading.Thread(target=download_file, args=(f"{root}/slow/data.bin", destination))
    first.start()  # a thread opens the lock file on its own, so its lock excludes this one's as a process's would
    deadline = time.monotonic() + 30
    while not list(tmp_path.glob(".data.bin.*.part")):  # the first is downloading
        assert time.monotonic() < deadline and first.is_alive()
        time.sleep(0.01)
    download_file(f"{root}/slow/data.bin", destination)
    first.join()
    assert destination.read_bytes() == content
    assert paths_served() == ["/slow/data.bin"]
    assert capsys.readouterr().out == f"{destination}: another process is downloading it; waiting for it\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.bin", "served"]
    download_file(f"{root}/data.bin", destination)  # there already: nothing is asked for
    assert paths_served() == ["/slow/data.bin"]
