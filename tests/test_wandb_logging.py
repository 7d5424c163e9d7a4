"""`--logger wandb`: every scalar the run gives TensorBoard reaches a Weights & Biases run too, at the
same step; the W&B run lives in the run folder, continues when the run is resumed, learns how the
run ended, and a W&B that cannot be used is one line before anything is trained.

The W&B runs are real ones, made by the wandb package in offline mode (no network here) and read
back from the `.wandb` file it writes: a LevelDB-style log of `wandb.proto` records.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_d4rl_cql_example import TINY

from conftest import run_in_process, run_repo_script
from offline_rl.core.errors import OfflineRLError, TrainingDiverged
from offline_rl.core.interrupts import Terminated
from offline_rl.results.runs import _scalars
from offline_rl.runs.config import LoggingConfig
from offline_rl.runs.wandb_logger import RUN_ID_FILE, STEP_KEY, WandbRun, mirror_scalars, require_wandb

WANDB_EXTRA = "the W&B tests need the wandb extra: pip install -e '.[wandb]'"
OFFLINE = {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}
_BLOCK = 32 * 1024


def wandb_records(run_folder: Path) -> list[list[Any]]:
    """The records of each W&B run the folder holds (one per session of the run), in order of start."""
    wandb_proto = pytest.importorskip(
        "wandb.proto", reason="the W&B tests need the wandb extra: pip install -e '.[wandb]'"
    )
    wandb_internal_pb2 = wandb_proto.wandb_internal_pb2

    sessions = []
    for file in sorted(run_folder.glob("wandb/offline-run-*/run-*.wandb")):
        data = file.read_bytes()
        assert data[:4] == b":W&B", file
        records, position, pieces = [], 7, b""
        while position + 7 <= len(data):
            if _BLOCK - position % _BLOCK < 7:  # a block's tail too short for a header is padding
                position += _BLOCK - position % _BLOCK
                continue
            _, length, kind = struct.unpack("<IHB", data[position : position + 7])
            if kind == 0 and length == 0:
                break
            payload, position = data[position + 7 : position + 7 + length], position + 7 + length
            pieces = payload if kind in (1, 2) else pieces + payload  # full, first, middle, last
            if kind in (1, 4):
                record = wandb_internal_pb2.Record()
                record.ParseFromString(pieces)
                records.append(record)
        sessions.append(records)
    return sessions


def exited_session_records(run_folder: Path, timeout: float = 120.0) -> list[Any]:
    """The records of the folder's one W&B session once W&B's service has written its exit record: the
    service writes the file in its own process, which may still be writing after `finish` returns."""
    deadline = time.monotonic() + timeout
    while True:
        (records,) = wandb_records(run_folder)
        if of_kind(records, "exit") or time.monotonic() > deadline:
            return records
        time.sleep(0.1)


def of_kind(records: list[Any], kind: str) -> list[Any]:
    return [getattr(record, kind) for record in records if record.WhichOneof("record_type") == kind]


def history_rows(records: list[Any]) -> list[dict[str, Any]]:
    return [
        {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in row.item}
        for row in of_kind(records, "history")
    ]


def scalars_of(rows: list[dict[str, Any]]) -> list[tuple[str, int, float]]:
    """(tag, step, value) of every figure in W&B's rows, in the order they were logged."""
    return [
        (tag, row[STEP_KEY], value)
        for row in rows
        for tag, value in row.items()
        if not tag.startswith("_") and tag != STEP_KEY
    ]


def run_d4rl_cql(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    return run_repo_script(
        "examples/d4rl_cql.py", *args, cwd=tmp_path, env_extra={**OFFLINE, "HOME": str(tmp_path), **(env or {})}
    )


def test_a_run_logs_to_tensorboard_and_the_same_figures_to_wandb_and_resumes_the_same_wandb_run(
    tmp_path: Path,
) -> None:
    pytest.importorskip("wandb", reason=WANDB_EXTRA)
    first = run_d4rl_cql(tmp_path, *TINY, "--epoch", "1", "--log-interval", "5", "--logger", "wandb")
    assert first.returncode == 0, first.stderr[-2000:]
    (folder,) = (tmp_path / "log" / "Pendulum-v1" / "cql" / "0").iterdir()
    run_id = json.loads((folder / RUN_ID_FILE).read_text())["id"]
    (started,) = [line for line in first.stdout.splitlines() if line.startswith("W&B: ")]
    assert started.startswith(f"W&B: run Pendulum-v1/cql/0/{folder.name} ({run_id}) kept offline: wandb sync ")
    assert first.stdout.strip().splitlines()[-1].endswith(started.split("kept offline: ")[1])  # the summary line too

    resumed = run_d4rl_cql(tmp_path, "--resume-path", str(folder / "checkpoint.pth"), "--epoch", "2")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"W&B: resumed run Pendulum-v1/cql/0/{folder.name} ({run_id})" in resumed.stdout  # the saved --logger

    sessions = wandb_records(folder)
    assert len(sessions) == 2
    for records in sessions:
        (run,) = of_kind(records, "run")
        assert (run.run_id, run.project, run.display_name) == (run_id, "offline_rl", f"Pendulum-v1/cql/0/{folder.name}")
        (exit_,) = of_kind(records, "exit")
        assert exit_.exit_code == 0
    # W&B's rows hold exactly TensorBoard's scalars: tag, step and value (TensorBoard stores float32, and
    # keeps the last value where a resumed run logged a step again: the re-evaluation's timings)
    tensorboard = {(tag, step): value for tag, points in _scalars(folder).items() for step, value in points}
    mirrored = {(tag, step): value for tag, step, value in scalars_of(history_rows(sessions[0] + sessions[1]))}
    assert mirrored.keys() == tensorboard.keys() and len(mirrored) > 200
    assert all(mirrored[point] == pytest.approx(value, rel=1e-6) for point, value in tensorboard.items())
    assert {"update/critic_loss", "update/q_random", "test/returns_stat/mean"} <= {tag for tag, _ in mirrored}
    assert {step for tag, step in mirrored if tag == "update/critic_loss"} == {5, 10, 15, 20, 25, 30}
    # the settings as W&B's config, the run's summary as its summary
    config = {item.key: json.loads(item.value_json) for item in of_kind(sessions[1], "run")[0].config.update}
    settings = json.loads((folder / "run.json").read_text())  # as the resumed session wrote it: --epoch 2
    assert config["config"] == settings["config"] and config["dataset_info"] == settings["dataset_info"]
    assert (
        config["config"]["algorithm"]["cql_weight"] == 10.0 and config["config"]["run"]["logging"]["logger"] == "wandb"
    )
    summary = json.loads((folder / "summary.json").read_text())
    final = {
        item.key or "/".join(item.nested_key): json.loads(item.value_json)
        for record in of_kind(sessions[1], "summary")
        for item in record.update
    }
    assert final["last/return_mean"] == pytest.approx(summary["last"]["return_mean"])
    assert final["total_updates"] == 30 and final["mode"] == "train"


def test_a_missing_wandb_login_is_one_line_before_any_data_is_made(tmp_path: Path) -> None:
    pytest.importorskip("wandb", reason=WANDB_EXTRA)
    with socket.socket() as server:  # a W&B server that answers, for a user who never logged in
        server.bind(("127.0.0.1", 0))
        server.listen()
        online_without_a_key = {
            "WANDB_MODE": "online",
            "WANDB_BASE_URL": f"http://127.0.0.1:{server.getsockname()[1]}",
            "WANDB_API_KEY": "",
            "NETRC": str(tmp_path / "no-netrc"),
        }
        result = run_d4rl_cql(tmp_path, *TINY, "--epoch", "1", "--logger", "wandb", env=online_without_a_key)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    # W&B's own words say what is missing ("No API key configured" in 0.31, "api_key not configured" in 0.19)
    assert re.fullmatch(r"error: --logger wandb: .*(API key|api_key).*; or set WANDB_MODE=offline .*`wandb sync`", line)
    assert not (tmp_path / "cache").exists() and not list((tmp_path / "log").rglob("*"))  # asked before any data


def test_a_wandb_server_out_of_reach_is_one_line_within_seconds_before_any_data(tmp_path: Path) -> None:
    """W&B itself retries for 90 s before it gives up; its server is asked first."""
    pytest.importorskip("wandb", reason=WANDB_EXTRA)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, not listening: connections are refused
        env = {"WANDB_MODE": "online", "WANDB_BASE_URL": f"http://127.0.0.1:{port}", "WANDB_API_KEY": "k" * 40}
        args = [*TINY, "--epoch", "1", "--logger", "wandb"]  # refused before W&B is asked: in this process
        result = run_in_process("examples/d4rl_cql.py", *args, cwd=tmp_path, env_extra={**env, "HOME": str(tmp_path)})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: --logger wandb: cannot reach 127.0.0.1: Connection refused (W&B's server);")
    assert "WANDB_MODE=offline" in line and "wandb sync" in line
    assert not (tmp_path / "cache").exists() and not list((tmp_path / "log").rglob("*"))  # asked before any data


def test_without_the_wandb_package_it_is_one_line_before_any_data_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # importing wandb fails, as where it is not installed
    result = run_in_process("examples/d4rl_cql.py", *TINY, "--epoch", "1", "--logger", "wandb", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: --logger wandb needs the wandb package") and "--logger tensorboard" in line
    assert not (tmp_path / "cache").exists() and not list((tmp_path / "log").rglob("*"))  # no data, no run


def test_require_wandb_only_for_the_wandb_logger(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "wandb", None)  # as if not installed
    require_wandb(LoggingConfig())  # TensorBoard alone needs nothing
    with pytest.raises(OfflineRLError, match="--logger wandb needs the wandb package"):
        require_wandb(LoggingConfig(logger="wandb"))


class RecordingRun:
    """W&B's run as `WandbRun` drives it: the rows it logs and how it was finished."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.summary: dict[str, Any] = {}
        self.exit_code: int | None = None

    def log(self, row: dict[str, Any]) -> None:
        self.rows.append(row)

    def finish(self, exit_code: int) -> None:
        self.exit_code = exit_code


class RecordingWriter:
    def __init__(self) -> None:
        self.scalars: list[tuple[str, float, int]] = []

    def add_scalar(self, tag: str, value: float, global_step: int | None = None) -> None:
        self.scalars.append((tag, value, global_step))

    def flush(self) -> None:
        pass


def test_the_scalars_of_one_step_are_one_wandb_row_flushed_with_the_writer() -> None:
    run = RecordingRun()
    wandb_run = WandbRun(run, Path("."))
    writer = mirror_scalars(RecordingWriter(), wandb_run)
    writer.add_scalar("train/a", 1.0, 100)
    writer.add_scalar("train/b", 2.0, 100)
    assert run.rows == []  # the step's row is still open
    writer.add_scalar("test/r", -3.0, 200)  # another step closes it
    writer.flush()  # the writer's flush sends the open row
    assert run.rows == [{"train/a": 1.0, "train/b": 2.0, STEP_KEY: 100}, {"test/r": -3.0, STEP_KEY: 200}]
    assert writer.scalars == [("train/a", 1.0, 100), ("train/b", 2.0, 100), ("test/r", -3.0, 200)]
    writer.add_scalar("train/a", 4.0, 300)
    wandb_run.finish(130, {"last": {"return_mean": 1.5}, "log_path": "x", "best": None})
    assert run.rows[-1] == {"train/a": 4.0, STEP_KEY: 300} and run.exit_code == 130
    assert run.summary == {"last/return_mean": 1.5, "log_path": "x"} and wandb_run.finished


@pytest.mark.parametrize(
    ("stop", "code"), [(KeyboardInterrupt, 130), (Terminated, 143), (TrainingDiverged, 2), (RuntimeError, 1)]
)
def test_a_run_that_stops_tells_wandb_its_exit_status(tmp_path: Path, stop: type[BaseException], code: int) -> None:
    from offline_rl.runs.config import RunConfig
    from offline_rl.runs.folder import RunFolder

    run = RecordingRun()
    folder = RunFolder(None, RunConfig(), tmp_path, RecordingWriter(), None, {}, wandb=WandbRun(run, tmp_path))
    folder.writer.close = lambda: None
    with pytest.raises(stop), folder.training(lambda: "3 updates"):
        raise stop()
    assert run.exit_code == code


def test_a_filmed_evaluations_preview_is_a_wandb_video_in_the_row_of_its_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GIF TensorBoard gets (`RunFolder.add_video`) reaches W&B as a video among its step's figures."""
    wandb = pytest.importorskip("wandb", reason=WANDB_EXTRA)
    from offline_rl.runs.config import RunConfig
    from offline_rl.runs.folder import RunFolder
    from offline_rl.runs.video_preview import Preview

    for name, value in {**OFFLINE, "HOME": str(tmp_path), "WANDB_DIR": str(tmp_path)}.items():
        monkeypatch.setenv(name, value)
    gif = b"GIF89a" + bytes(range(256)) * 4  # W&B stores the bytes as given
    run = wandb.init(project="offline_rl", dir=str(tmp_path), settings=wandb.Settings(silent=True, console="off"))
    wandb_run = WandbRun(run, tmp_path)
    writer = RecordingWriter()
    writer._get_file_writer = lambda: writer
    writer.add_summary = lambda summary, step: writer.scalars.append((summary.value[0].tag, 0.0, step))
    folder = RunFolder(None, RunConfig(), tmp_path, mirror_scalars(writer, wandb_run), None, {}, wandb=wandb_run)
    folder.writer.add_scalar("update/critic_loss", 1.5, 4)
    folder.add_video("eval/video", Preview(gif, 160, 160, 10, 0.4), 4)
    folder.writer.add_scalar("eval/return_mean", 7.0, 4)
    folder.writer.add_scalar("update/critic_loss", 1.25, 6)
    wandb_run.finish(0)

    assert writer.scalars == [
        ("update/critic_loss", 1.5, 4),
        ("eval/video", 0.0, 4),
        ("eval/return_mean", 7.0, 4),
        ("update/critic_loss", 1.25, 6),
    ]
    records = exited_session_records(tmp_path)
    rows = history_rows(records)
    # (the video's fields arrive as nested keys: eval/video/path, eval/video/_type, ...)
    videos = [{key.split("/")[-1]: row[key] for key in row if key.startswith("eval/video/")} for row in rows]
    figures = [sorted(key for key in row if not key.startswith(("_", "eval/video/"))) for row in rows]
    assert figures == [["eval/return_mean", STEP_KEY, "update/critic_loss"], [STEP_KEY, "update/critic_loss"]]
    assert rows[0][STEP_KEY] == 4 and videos[0]["_type"] == "video-file" and not videos[1]
    (files,) = tmp_path.glob("wandb/offline-run-*/files")
    assert (files / videos[0]["path"]).read_bytes() == gif
