"""DQN Replay conversion, on checkpoints written as Dopamine's replay writes them (gzip-compressed .npy)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
from tqdm import tqdm

from conftest import modules_imported_by, run_in_process, run_repo_script
from offline_rl.core.errors import DatasetError
from offline_rl.data import dataset_info, load_buffer, load_buffers
from offline_rl.data.dqn_replay import convert_checkpoint, sampled_slots
from offline_rl.data.dqn_replay.sources import (
    array_file,
    checkpoint_files,
    checkpoint_label,
    checkpoints_in,
    file_url,
    folder_url,
    recorded_task,
)
from offline_rl.data.dqn_replay.testing import DopamineReplay, step_frame
from offline_rl.data.frame_padding import frame_padding_of
from offline_rl.data.frame_pool import FramePoolBuffer

SMALL = (6, 6)


def play(replay: DopamineReplay, episodes: list[tuple[int, bool]], rng: np.random.Generator, first: int = 0) -> dict:
    """Add whole episodes (length, ends at a terminal) step by step; the truth of every step by its frame."""
    truth = {}
    for number, (length, terminal) in enumerate(episodes, first):
        for step in range(length):
            frame = step_frame(number, step, replay.store["observation"].shape[1:])
            action, reward = int(rng.integers(0, 6)), float(rng.choice([-1.0, 0.0, 1.0]))
            ends = terminal and step == length - 1
            replay.add(frame, action, reward, ends)
            truth[frame.tobytes()] = (number, step, action, reward, ends)
    return truth


def dopamine_samples(replay: DopamineReplay) -> set[int]:
    """Every index Dopamine's `is_valid_transition` accepts (update horizon 1), checked one by one."""
    capacity, stack, cursor = replay.capacity, replay.stack, replay.cursor()
    full = int(replay.add_count) >= capacity
    invalid = set(replay.invalid_range().tolist()) if int(replay.add_count) else set()
    valid = set()
    for index in range(capacity):
        if not full and (index >= cursor - 1 or index < stack - 1):
            continue
        if index in invalid:
            continue
        history = [(index - back) % capacity for back in range(stack - 1, 0, -1)]
        if replay.store["terminal"][history].any():
            continue
        valid.add(index)
    return valid


def stack_of(truth_by_episode: dict, number: int, step: int, shape: tuple[int, int]) -> np.ndarray:
    frames = [step_frame(number, s, shape) if s >= 0 else np.zeros(shape, np.uint8) for s in range(step - 3, step + 1)]
    return np.stack(frames)


def check_against_truth(buffer: FramePoolBuffer, truth: dict, shape: tuple[int, int]) -> list[tuple[int, int]]:
    """Every row is the step its newest frame says, with that step's stacks, action, reward and end;
    rows run forward within an episode. Returns the (episode, step) of each row."""
    batch = buffer[np.arange(len(buffer))]
    steps = []
    for row in range(len(buffer)):
        number, step, action, reward, ends = truth[batch.obs[row, -1].tobytes()]
        steps.append((number, step))
        np.testing.assert_array_equal(batch.obs[row], stack_of(truth, number, step, shape))
        if not ends:
            np.testing.assert_array_equal(batch.obs_next[row], stack_of(truth, number, step + 1, shape))
        assert (int(batch.act[row]), float(batch.rew[row]), bool(batch.terminated[row])) == (action, reward, ends)
    for row in range(len(buffer) - 1):
        if not batch.done[row]:
            assert steps[row + 1] == (steps[row][0], steps[row][1] + 1)
    return steps


def test_the_slots_dopamine_samples_by_hand() -> None:
    # capacity 12; slots 0-2 padding, 3-5 an episode ending at 5, 6-8 padding, 9-10 a running one
    replay = DopamineReplay(12, SMALL)
    rng = np.random.default_rng(0)
    play(replay, [(3, True), (2, False)], rng)
    assert int(replay.add_count) == 11
    assert sampled_slots(replay.store["terminal"], 11, 12, 12).tolist() == [3, 4, 5, 9]  # 10: no next frame yet
    # six more steps wrap around: slots 11, 0, 1, 2, 3, 4; the oldest slot is now 5 (the terminal step)
    for step in range(2, 8):
        replay.add(step_frame(1, step, SMALL), 0, 0.0, False)
    assert replay.cursor() == 5
    assert sampled_slots(replay.store["terminal"], 17, 12, 12).tolist() == [9, 10, 11, 0, 1, 2, 3]


@pytest.mark.parametrize("episodes", [[(7, True), (12, False)], [(40, True), (9, True), (55, True), (30, False)]])
def test_conversion_keeps_exactly_what_dopamine_samples_with_its_states(tmp_path: Path, episodes) -> None:
    """Not full (first case) and wrapped around several times (second): the rows are Dopamine's valid
    indices, each the true step with black padding at its episode's start, in playing order."""
    replay = DopamineReplay(64, SMALL)
    truth = play(replay, episodes, np.random.default_rng(1))
    replay.save(tmp_path, 3)
    summary = convert_checkpoint(tmp_path, 3, tmp_path / "out.hdf5")
    buffer = load_buffer(tmp_path / "out.hdf5")
    assert isinstance(buffer, FramePoolBuffer)
    assert summary.transitions == len(buffer) == len(dopamine_samples(replay))
    steps = check_against_truth(buffer, truth, SMALL)
    slots = sampled_slots(replay.store["terminal"], int(replay.add_count), 64, 64)
    assert set(slots.tolist()) == dopamine_samples(replay)
    # the newest step has no next frame and is left out; the one before ends the data as truncated
    assert bool(buffer.truncated[-1]) and not bool(buffer.terminated[-1])
    assert int(buffer.truncated.sum()) == 1
    assert int(buffer.terminated.sum()) == sum(1 for number, step in steps if truth_end(truth, number, step))
    assert frame_padding_of(buffer) == "zero"


def truth_end(truth: dict, number: int, step: int) -> bool:
    return any(value[:2] == (number, step) and value[4] for value in truth.values())


@pytest.mark.parametrize("fraction", [0.25, 0.75])  # the write position (slot 44) outside, then inside
def test_fraction_keeps_the_first_slots_whole_transitions_only(tmp_path: Path, fraction: float) -> None:
    replay = DopamineReplay(80, SMALL)
    truth = play(replay, [(30, True), (25, True), (60, False)], np.random.default_rng(2))
    assert replay.cursor() == 44
    replay.save(tmp_path, 0)
    window = round(80 * fraction)
    whole = convert_checkpoint(tmp_path, 0, tmp_path / "whole.hdf5")
    part = convert_checkpoint(tmp_path, 0, tmp_path / "part.hdf5", fraction=fraction)
    assert part.slots_read == window and whole.slots_read == 80
    buffer = load_buffer(tmp_path / "part.hdf5")
    steps = check_against_truth(buffer, truth, SMALL)
    # the rows are the whole conversion's rows whose stack and next frame lie in the window, in its order
    whole_steps = check_against_truth(load_buffer(tmp_path / "whole.hdf5"), truth, SMALL)
    all_slots = sampled_slots(replay.store["terminal"], int(replay.add_count), 80, 80)
    inside = [step for slot, step in zip(all_slots, whole_steps, strict=True) if slot >= 3 and slot + 1 < window]
    assert steps == inside and len(steps) > 0
    assert buffer.frames.shape[0] == window


def test_checkpoint_files_are_found_and_named_as_in_the_bucket(tmp_path: Path, monkeypatch) -> None:
    replay = DopamineReplay(16, SMALL)
    play(replay, [(5, True)], np.random.default_rng(3))
    folder = tmp_path / "Pong" / "1" / "replay_logs"
    replay.save(folder, 0)
    replay.save(folder, 7)
    (folder / array_file("reward", 7)).unlink()
    assert checkpoints_in(folder) == [0]
    assert sorted(p.name for p in folder.iterdir())[0] == "$store$_action_ckpt.0.gz"
    assert recorded_task(folder) == "ALE/Pong-v5" and recorded_task(tmp_path) is None
    assert checkpoint_label(folder, 7) == "Pong/1/ckpt.7"
    monkeypatch.delenv("DQN_REPLAY_MIRROR", raising=False)
    assert file_url(folder_url("Pong", 1), "$store$_observation_ckpt.0.gz") == (
        "https://storage.googleapis.com/atari-replay-datasets/dqn/Pong/1/replay_logs/%24store%24_observation_ckpt.0.gz"
    )


def test_damaged_checkpoints_are_one_line_errors(tmp_path: Path) -> None:
    replay = DopamineReplay(40, SMALL)
    play(replay, [(20, True), (10, False)], np.random.default_rng(4))
    replay.save(tmp_path, 0)
    frames = tmp_path / array_file("observation", 0)
    whole = frames.read_bytes()
    frames.write_bytes(whole[: len(whole) // 2])
    cut_short = r"observation_ckpt\.0\.gz: (ends after|damaged or cut short within rows 0 to)"
    with pytest.raises(DatasetError, match=cut_short):
        convert_checkpoint(tmp_path, 0, tmp_path / "out.hdf5")
    assert not (tmp_path / "out.hdf5").exists() and not list(tmp_path.glob("*.hdf5*"))
    frames.write_bytes(b"not gzip at all")
    with pytest.raises(DatasetError, match=r"not a gzip-compressed \.npy array"):
        convert_checkpoint(tmp_path, 0, tmp_path / "out.hdf5")
    replay.save(tmp_path, 0)
    with open(tmp_path / array_file("action", 0), "wb") as file, gzip.GzipFile(fileobj=file, mode="wb") as out:
        np.save(out, np.zeros(39, np.int32))
    with pytest.raises(DatasetError, match=r"action_ckpt\.0\.gz: expected 40 integer values"):
        convert_checkpoint(tmp_path, 0, tmp_path / "out.hdf5")
    (tmp_path / array_file("add_count", 0)).unlink()
    with pytest.raises(DatasetError, match=r"add_count_ckpt\.0\.gz: no such file"):
        convert_checkpoint(tmp_path, 0, tmp_path / "out.hdf5")


def test_a_checkpoint_the_folder_lacks_is_named_before_any_is_converted(tmp_path: Path) -> None:
    from offline_rl.cli.convert_dqn_replay import config_from_args, jobs_for_folder
    from offline_rl.core.errors import OfflineRLError

    replay = DopamineReplay(40, SMALL)
    play(replay, [(20, True), (10, False)], np.random.default_rng(4))
    for checkpoint in (0, 1, 2, 5):
        replay.save(tmp_path, checkpoint)
    (tmp_path / array_file("reward", 5)).unlink()

    def jobs(*checkpoints: str) -> list[int]:
        flags = ["--replay-dir", str(tmp_path), "--output", str(tmp_path / "out")]
        return [job.checkpoint for job in jobs_for_folder(config_from_args([*flags, "--checkpoint", *checkpoints]))]

    assert jobs("2", "0") == [2, 0]
    with pytest.raises(OfflineRLError) as caught:
        jobs("0", "3")  # checkpoint 0 is not converted first: the line comes before any work
    assert str(caught.value) == f"--checkpoint 3: not in {tmp_path}; its complete checkpoints are 0-2"
    with pytest.raises(OfflineRLError) as caught:
        jobs("5")
    assert str(caught.value) == (
        f"--checkpoint 5: incomplete in {tmp_path} ($store$_reward_ckpt.5.gz is missing); "
        "its complete checkpoints are 0-2"
    )
    assert not (tmp_path / "out").exists()


def test_converter_command_end_to_end_then_atari_cql_trains_on_two_checkpoints(tmp_path: Path) -> None:
    folder = tmp_path / "Pong" / "1" / "replay_logs"
    rng = np.random.default_rng(5)
    replay = DopamineReplay(120, (84, 84))
    play(replay, [(50, True), (40, True)], rng)
    replay.save(folder, 0)
    play(replay, [(45, True), (30, False)], rng, first=2)
    replay.save(folder, 1)
    out = tmp_path / "buffers"
    command = ("converters/dqn_replay_atari.py", "--replay-dir", str(folder), "--output", str(out))
    first = run_in_process(*command, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert any(line.startswith("converted 2 checkpoint(s):") for line in lines)
    assert sorted(p.name for p in out.iterdir()) == ["ckpt_0.hdf5", "ckpt_1.hdf5"]
    again = run_in_process(*command, cwd=tmp_path)
    assert again.returncode == 0 and again.stdout.count("already converted, skipped") == 2
    buffer = load_buffers(sorted(out.iterdir()))
    assert dataset_info(buffer)["task"] == "ALE/Pong-v5"
    assert dataset_info(load_buffer(out / "ckpt_1.hdf5"))["name"] == "Pong/1/ckpt.1"
    trained = run_in_process(
        "examples/atari_cql.py",
        "--load-buffer-name",
        str(out / "ckpt_0.hdf5"),
        str(out / "ckpt_1.hdf5"),
        "--epoch",
        "1",
        "--update-per-epoch",
        "10",
        "--batch-size",
        "8",
        "--num-quantiles",
        "8",
        "--test-num",
        "1",
        "--logdir",
        str(tmp_path / "log"),
        cwd=tmp_path,
    )
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert "task: ALE/Pong-v5" in trained.stdout
    assert f"{out}/ckpt_{{0-1}}.hdf5: " in trained.stdout  # the files, named once
    assert any(line.startswith("done: ALE/Pong-v5 on Pong/1/ckpt.{0-1}:") for line in trained.stdout.splitlines())
    assert any(line.startswith("done:") and "10 updates" in line for line in trained.stdout.splitlines())


def three_checkpoints(folder: Path) -> None:
    rng = np.random.default_rng(9)
    replay = DopamineReplay(90, (84, 84))
    for checkpoint, first in enumerate((0, 2, 4)):
        play(replay, [(35, True), (25, False)], rng, first=first)
        replay.save(folder, checkpoint)


def assert_same_buffer(path: Path, reference: Path) -> None:
    mine, theirs = load_buffer(path), load_buffer(reference)
    rows = np.arange(len(theirs))
    assert len(mine) == len(theirs) > 0
    for key in ("obs", "obs_next", "act", "rew", "terminated", "truncated"):
        np.testing.assert_array_equal(mine[rows][key], theirs[rows][key], err_msg=f"{path}: {key}")


def convert_folder(folder: Path, out: Path, *flags: str):
    return run_in_process(
        "converters/dqn_replay_atari.py", "--replay-dir", str(folder), "--output", str(out), *flags, cwd=folder.parent
    )


def test_checkpoints_convert_in_worker_processes_as_they_would_one_by_one(tmp_path: Path) -> None:
    folder = tmp_path / "Pong" / "1" / "replay_logs"
    three_checkpoints(folder)
    out = tmp_path / "buffers"
    done = convert_folder(folder, out, "--workers", "2")
    assert done.returncode == 0, done.stderr
    for checkpoint in range(3):
        convert_checkpoint(folder, checkpoint, tmp_path / f"alone-{checkpoint}.hdf5")
        assert_same_buffer(out / f"ckpt_{checkpoint}.hdf5", tmp_path / f"alone-{checkpoint}.hdf5")
        assert done.stdout.count(f"ckpt.{checkpoint}.gz: ") == 1  # its summary line, once
    assert "converted 3 checkpoint(s)" in done.stdout.splitlines()[-1]


def _gzip_npy(path: Path, header_array: np.ndarray, payload: bytes | None = None) -> Path:
    """A gzip-compressed .npy file whose header describes `header_array`, followed by `payload` (its
    data by default): a file that decompresses cleanly yet holds fewer rows than its header says."""
    with open(path, "wb") as file, gzip.GzipFile(fileobj=file, mode="wb") as out:
        np.lib.format.write_array_header_1_0(out, np.lib.format.header_data_from_array_1_0(header_array))
        out.write(header_array.tobytes() if payload is None else payload)
    return path


def test_arrays_that_are_not_dopamines_are_one_line_errors(tmp_path: Path) -> None:
    from offline_rl.data.dqn_replay.npy_stream import NpyStream, read_npy

    rows = np.arange(40, dtype=np.int32).reshape(10, 4)
    whole = _gzip_npy(tmp_path / "whole.gz", rows)
    np.testing.assert_array_equal(read_npy(whole), rows)
    np.testing.assert_array_equal(read_npy(whole, rows=3), rows[:3])
    short = _gzip_npy(tmp_path / "short.gz", rows, rows[:4].tobytes())  # re-compressed from a partial copy
    with NpyStream(short) as stream:
        np.testing.assert_array_equal(stream.read_rows(3), rows[:3])
        with pytest.raises(DatasetError, match=r"short\.gz: ends after 4 of its 10 rows \(an interrupted download"):
            stream.read_rows(5)
    with open(tmp_path / "pickled.gz", "wb") as file, gzip.GzipFile(fileobj=file, mode="wb") as out:
        np.save(out, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(DatasetError, match=r"pickled\.gz: holds a pickled array, not one of Dopamine's"):
        read_npy(tmp_path / "pickled.gz")
    fortran = _gzip_npy(tmp_path / "fortran.gz", np.asfortranarray(rows))
    with pytest.raises(DatasetError, match=r"fortran\.gz: holds a Fortran-ordered array, not one of Dopamine's"):
        read_npy(fortran)
    assert read_npy(_gzip_npy(tmp_path / "scalar.gz", np.array(7, np.int64))) == 7  # an add count is 0-d
    with pytest.raises(DatasetError, match=r"absent\.gz: cannot be read \(No such file or directory\)"):
        read_npy(tmp_path / "absent.gz")


def test_a_damaged_checkpoint_among_workers_fails_alone_and_leaves_no_partial_file(tmp_path: Path) -> None:
    folder = tmp_path / "replay_logs"
    three_checkpoints(folder)
    frames = folder / array_file("observation", 1)
    frames.write_bytes(frames.read_bytes()[:-500])
    out = tmp_path / "buffers"
    done = convert_folder(folder, out, "--workers", "2")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert array_file("observation", 1) in done.stderr.strip().splitlines()[-1]
    assert sorted(p.name for p in out.iterdir()) == ["ckpt_0.hdf5", "ckpt_2.hdf5"]  # no temporary left either
    again = convert_folder(folder, out)  # only the damaged one is tried again
    assert again.stdout.count("already converted, skipped") == 2 and again.returncode == 2


def test_whole_checkpoints_download_in_their_workers_and_one_missing_on_the_mirror_fails_alone(
    tmp_path: Path, http_server: tuple[str, Path]
) -> None:
    """Each worker fetches its own checkpoint's files over HTTP, so downloads run side by side and
    overlap conversions; their bytes go to one download bar. A file the mirror lacks fails its
    checkpoint alone, naming its URL; the checkpoints whose files came are converted."""
    root, served = http_server
    mirror = served / "Pong" / "1" / "replay_logs"
    three_checkpoints(mirror)
    (mirror / array_file("reward", 1)).unlink()
    home = tmp_path / "home"
    flags = ("--task", "Pong", "--checkpoint", "0", "1", "2", "--workers", "2")
    done = run_in_process(
        "converters/dqn_replay_atari.py", *flags, cwd=tmp_path, env_extra={"DQN_REPLAY_MIRROR": root, "HOME": str(home)}
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: dataset not found at ") and last.count("failed") == 1
    assert f"{root}/Pong/1/replay_logs/%24store%24_reward_ckpt.1.gz failed (File not found)" in last
    buffers = home / ".dqn_replay" / "buffers" / "Pong" / "1"
    assert sorted(p.name for p in buffers.iterdir()) == ["ckpt_0.hdf5", "ckpt_2.hdf5"]
    for checkpoint in (0, 2):
        convert_checkpoint(mirror, checkpoint, tmp_path / f"local-{checkpoint}.hdf5")
        assert_same_buffer(buffers / f"ckpt_{checkpoint}.hdf5", tmp_path / f"local-{checkpoint}.hdf5")
    stored = home / ".dqn_replay" / "datasets" / "Pong" / "1" / "replay_logs"
    assert checkpoints_in(stored) == [0, 2]
    fetched = sorted(p.name for p in stored.iterdir())  # ckpt 1's files up to the missing one; no temporary
    assert fetched == sorted([*checkpoint_files(0), *checkpoint_files(2), *checkpoint_files(1)[:2]])
    download_lines = [line for line in done.stderr.splitlines() if line.startswith("download")]
    assert download_lines and download_lines[-1].startswith("download: 100%")  # one bar, not one per file
    size = tqdm.format_sizeof(sum((stored / name).stat().st_size for name in fetched))
    assert f" {size}/{size} " in download_lines[-1]
    three_checkpoints(mirror)  # the mirror mended (the same files again): only ckpt 1's 3 missing files come
    again = run_in_process(
        "converters/dqn_replay_atari.py", *flags, cwd=tmp_path, env_extra={"DQN_REPLAY_MIRROR": root, "HOME": str(home)}
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("already converted, skipped") == 2 and checkpoints_in(stored) == [0, 1, 2]
    rest = tqdm.format_sizeof(sum((stored / name).stat().st_size for name in checkpoint_files(1)[2:]))
    assert f" {rest}/{rest} " in [line for line in again.stderr.splitlines() if line.startswith("download")][-1]
    convert_checkpoint(mirror, 1, tmp_path / "local-1.hdf5")
    assert_same_buffer(buffers / "ckpt_1.hdf5", tmp_path / "local-1.hdf5")


def test_ray_tasks_stream_each_checkpoints_first_slots_from_the_mirror(tmp_path: Path, ray_address: str) -> None:
    mirror = tmp_path / "mirror"
    three_checkpoints(mirror / "Pong" / "1" / "replay_logs")
    home = tmp_path / "home"
    flags = ["--task", "Pong", "--checkpoint", "0", "2", "--fraction", "0.5", "--ray-address", ray_address]
    done = run_repo_script(  # a Ray driver of its own
        "converters/dqn_replay_atari.py",
        *flags,
        cwd=tmp_path,
        env_extra={"DQN_REPLAY_MIRROR": mirror.as_uri(), "HOME": str(home)},
        fresh=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "converted 2 checkpoint(s)" in done.stdout.splitlines()[-1]
    for checkpoint in (0, 2):
        reference = tmp_path / f"local-{checkpoint}.hdf5"
        convert_checkpoint(mirror / "Pong" / "1" / "replay_logs", checkpoint, reference, fraction=0.5)
        buffers = home / ".dqn_replay" / "buffers" / "Pong" / "1"
        assert_same_buffer(buffers / f"ckpt_{checkpoint}-first_0.5.hdf5", reference)
    stored = home / ".dqn_replay" / "datasets" / "Pong" / "1" / "replay_logs"
    assert not any("observation" in p.name for p in stored.iterdir())  # frames were streamed, not stored


def test_a_misspelt_game_gets_the_game_meant_and_a_real_one_missing_gets_the_list() -> None:
    from offline_rl.core.errors import OfflineRLError
    from offline_rl.data.dqn_replay.sources import game_name
    from offline_rl.data.rl_unplugged.sources import game_name as rl_unplugged_game

    for task, meant in (("Seaqest", "Seaquest"), ("ALE/Breakuot-v5", "Breakout"), ("mspackman", "MsPacman")):
        with pytest.raises(OfflineRLError, match=rf"not a DQN Replay game; did you mean {meant}\?$"):
            game_name(task)
    with pytest.raises(OfflineRLError) as caught:  # in DQN Replay, not in RL Unplugged: not "Asterix?"
        rl_unplugged_game("Asteroids")
    assert "did you mean" not in str(caught.value) and "; expected one of " in str(caught.value)
    assert game_name("Asteroids") == "Asteroids"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--task", "NotAGame"], "--task NotAGame: not a DQN Replay game; expected one of AirRaid, Alien"),
        (["--task", "PonggNoFrameskip-v4"], "--task PonggNoFrameskip-v4: not a DQN Replay game; did you mean Pong?"),
        (["--task", "Pong", "--replay-dir", "x"], "give either --task"),
        (["--fraction", "0", "--task", "Pong"], "--fraction"),
        (["--replay-dir", "missing-folder"], "--replay-dir missing-folder: no such folder"),
        (["--task", "Pong", "--checkpoint", "51"], "--checkpoint"),
    ],
)
def test_bad_flags_are_one_line_errors(tmp_path: Path, args: list[str], message: str) -> None:
    done = run_in_process("converters/dqn_replay_atari.py", *args, cwd=tmp_path)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("reachable", [True, False])
def test_no_network_names_the_url_and_where_to_put_the_file(tmp_path: Path, reachable: bool) -> None:
    """A mirror without the file, and one whose host cannot be reached: the latter is found before any
    worker starts, rather than by each checkpoint's download waiting out its timeout."""
    mirror = (tmp_path / "mirror-that-does-not-exist").as_uri() if reachable else "http://127.0.0.1:9/dqn"
    done = run_in_process(
        "converters/dqn_replay_atari.py",
        "--task",
        "Pong",
        "--checkpoint",
        "4",
        "5",
        "--dataset-dir",
        str(tmp_path / "data"),
        "--buffer-dir",
        str(tmp_path / "buffers"),
        cwd=tmp_path,
        env_extra={"DQN_REPLAY_MIRROR": mirror},
    )
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert f"{mirror}/Pong/1/replay_logs/%24store%24_observation_ckpt.4.gz" in last
    assert "--replay-dir" in last
    if reachable:  # each checkpoint tried its download
        assert last.endswith("(1 more failed)")
    else:
        assert "cannot reach 127.0.0.1" in last and "convert" not in done.stderr
        flags = ["--task", "Pong", "--dataset-dir", str(tmp_path / "data"), "--buffer-dir", str(tmp_path / "buffers")]
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("DQN_REPLAY_MIRROR", mirror)
            assert modules_imported_by("converters/dqn_replay_atari.py", flags, watched=("tianshou", "torch")) == []
    assert not [path for path in (tmp_path / "buffers").rglob("*") if path.is_file()]


def test_downloads_from_the_mirror_then_converts(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    replay = DopamineReplay(50, (84, 84))
    play(replay, [(20, True), (15, False)], np.random.default_rng(6))
    replay.save(mirror / "Breakout" / "2" / "replay_logs", 9)
    done = run_in_process(
        "converters/dqn_replay_atari.py",
        "--task",
        "BreakoutNoFrameskip-v4",
        "--run-id",
        "2",
        "--checkpoint",
        "9",
        cwd=tmp_path,
        env_extra={"DQN_REPLAY_MIRROR": mirror.as_uri(), "HOME": str(tmp_path / "home")},
    )
    assert done.returncode == 0, done.stderr
    result = tmp_path / "home" / ".dqn_replay" / "buffers" / "Breakout" / "2" / "ckpt_9.hdf5"
    assert dataset_info(load_buffer(result))["task"] == "ALE/Breakout-v5"
    downloads = tmp_path / "home" / ".dqn_replay" / "datasets" / "Breakout" / "2" / "replay_logs"
    assert checkpoints_in(downloads) == [9] and len(list(downloads.iterdir())) == 5  # nothing else, no leftovers


def test_a_fraction_reads_only_the_start_of_the_frame_file_as_it_downloads(tmp_path: Path) -> None:
    """The frame file is 99% of a checkpoint's bytes: for its first slots it is streamed from the mirror
    and never stored. Cut short after its first quarter, it still gives the first 10% of the slots,
    the same rows as converting a whole local copy."""
    folder = tmp_path / "mirror" / "Pong" / "1" / "replay_logs"
    replay = DopamineReplay(400, (84, 84))
    play(replay, [(150, True), (300, False)], np.random.default_rng(7))
    replay.save(folder, 0)
    local = convert_checkpoint(folder, 0, tmp_path / "local.hdf5", fraction=0.1)
    frames = folder / array_file("observation", 0)
    frames.write_bytes(frames.read_bytes()[: frames.stat().st_size // 4])
    home = tmp_path / "home"
    command = ("converters/dqn_replay_atari.py", "--task", "Pong", "--checkpoint", "0", "--fraction", "0.1")
    done = run_in_process(
        *command, cwd=tmp_path, env_extra={"DQN_REPLAY_MIRROR": (tmp_path / "mirror").as_uri(), "HOME": str(home)}
    )
    assert done.returncode == 0, done.stderr
    streamed = load_buffer(home / ".dqn_replay" / "buffers" / "Pong" / "1" / "ckpt_0-first_0.1.hdf5")
    assert len(streamed) == local.transitions > 0
    assert dataset_info(streamed)["name"] == "Pong/1/ckpt.0-first_0.1"  # a part is never named as the whole
    whole = load_buffer(tmp_path / "local.hdf5")
    rows = np.arange(len(whole))
    np.testing.assert_array_equal(streamed[rows].obs, whole[rows].obs)
    np.testing.assert_array_equal(streamed[rows].act, whole[rows].act)
    stored = sorted(p.name for p in (home / ".dqn_replay" / "datasets" / "Pong" / "1" / "replay_logs").iterdir())
    assert array_file("observation", 0) not in stored and len(stored) == 4
    # the whole checkpoint needs the whole file: the cut one is one line naming it
    again = run_in_process(
        *command[:-2], cwd=tmp_path, env_extra={"DQN_REPLAY_MIRROR": (tmp_path / "mirror").as_uri(), "HOME": str(home)}
    )
    assert again.returncode == 2 and "Traceback" not in again.stderr
    assert array_file("observation", 0) in again.stderr


def test_help_answers_without_importing_torch(tmp_path: Path) -> None:
    done = run_repo_script("converters/dqn_replay_atari.py", "--help", cwd=tmp_path, fresh=True)
    assert done.returncode == 0 and "--fraction" in done.stdout


def test_a_part_with_no_episode_start_still_evaluates_with_dopamines_black_padding(tmp_path: Path) -> None:
    """A small part of a checkpoint whose replay had wrapped around may hold no episode start, so its
    stacks cannot tell how episodes begin; the evaluation then padded with repeated frames, unlike the
    data. The converter records Dopamine's padding, which decides where the starts cannot."""
    from offline_rl.cli.atari_cql import evaluation_padding

    replay = DopamineReplay(40, (84, 84))
    play(replay, [(100, False)], np.random.default_rng(4))  # one long episode: the store wraps around
    replay.save(tmp_path, 0)
    convert_checkpoint(tmp_path, 0, tmp_path / "part.hdf5", fraction=0.25)
    part = load_buffer(tmp_path / "part.hdf5")
    assert len(part) > 0 and frame_padding_of(part) is None  # no stack in the part tells
    assert dataset_info(part)["frame_padding"] == "zero"
    assert evaluation_padding(part, None) == "zero"
