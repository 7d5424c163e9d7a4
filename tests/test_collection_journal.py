"""An interrupted `--watch --save-buffer-name` collection continues from what it kept on disk, and
the continued dataset never joins two episodes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from offline_rl.core.errors import DatasetError, OfflineRLError
from offline_rl.data import load_buffer
from offline_rl.data.frame_stack import FrameStackBufferBuilder
from offline_rl.data.transitions import TransitionRecorder
from offline_rl.runs.collection_journal import CollectionJournal, journal_directory

SETTINGS = {"--task": "PongNoFrameskip-v4", "--eps-test": 0.2}


class FrameGame:
    """Stacks of 4 (2×2 frames) whose newest frame counts the steps of the game so far."""

    def __init__(self) -> None:
        self.step_count = 0
        self.stack = np.zeros((4, 2, 2), np.uint8)

    def reset(self) -> np.ndarray:
        self.step_count = 0
        self.stack = np.full((4, 2, 2), 100, np.uint8)  # a game's first stack repeats its first frame
        return self.stack.copy()

    def step(self) -> np.ndarray:
        self.step_count += 1
        self.stack = np.concatenate([self.stack[1:], np.full((1, 2, 2), 100 + self.step_count, np.uint8)])
        return self.stack.copy()


def play(builder: FrameStackBufferBuilder, game: FrameGame, steps: int, episode_length: int = 7) -> None:
    obs = game.stack.copy() if game.step_count else game.reset()
    for _ in range(steps):
        obs_next = game.step()
        ended = game.step_count == episode_length
        builder.add(obs, 1, 1.0, ended, False, obs_next)
        obs = game.reset() if ended else obs_next


def test_frame_stack_rows_restore_exactly_across_parts(tmp_path: Path) -> None:
    """Parts cut mid-episode read back into the builder the collection had, frames and stacks alike."""
    builder, game = FrameStackBufferBuilder(frame_shape=(2, 2), max_frames=4), FrameGame()
    journal = CollectionJournal.open(tmp_path / "x.parts", SETTINGS, [FrameStackBufferBuilder(frame_shape=(2, 2))])
    play(builder, game, 5)
    journal.keep([builder], [])
    play(builder, game, 6)  # one episode ends at step 7, inside this part
    assert journal.keep([builder], [7.0]) is not None and journal.keep([builder], [7.0]) is None  # nothing new

    journal.release()  # the session ends
    restored = FrameStackBufferBuilder(frame_shape=(2, 2), max_frames=2)
    again = CollectionJournal.open(tmp_path / "x.parts", SETTINGS, [restored])
    assert len(restored) == 11 and again.returns == [7.0] and again.session == 1 and again.transitions == 11
    expected, got = builder.build(), restored.build()
    indices = np.arange(11)
    np.testing.assert_array_equal(got[indices].obs, expected[indices].obs)
    np.testing.assert_array_equal(got[indices].obs_next, expected[indices].obs_next)
    np.testing.assert_array_equal(got.terminated, expected.terminated)
    # The session that wrote the parts stopped mid-episode: that episode ends there, as truncated.
    assert got.truncated[-1] and not got.terminated[-1]


def test_a_continued_session_starts_new_episodes_and_the_cut_is_kept(tmp_path: Path) -> None:
    directory = tmp_path / "x.parts"
    first, game = FrameStackBufferBuilder(frame_shape=(2, 2)), FrameGame()
    journal = CollectionJournal.open(directory, SETTINGS, [FrameStackBufferBuilder(frame_shape=(2, 2))])
    play(first, game, 3)
    journal.keep([first], [])  # session 0 stops after 3 steps of an episode

    journal.release()
    second = FrameStackBufferBuilder(frame_shape=(2, 2))
    journal = CollectionJournal.open(directory, SETTINGS, [second])
    assert journal.session == 1
    play(second, FrameGame(), 4)  # a fresh game: its first stack is all 100s again
    journal.keep([second], [])
    journal.release()

    third = FrameStackBufferBuilder(frame_shape=(2, 2))
    CollectionJournal.open(directory, SETTINGS, [third])
    buffer = third.build()
    assert len(buffer) == 7
    assert buffer.truncated[2] and not buffer.terminated[2]  # the cut between the sessions, made again
    assert buffer.truncated[6]  # and the cut of the session that wrote the last part
    # No stack reaches back into the other session's episode: step 3 starts a game of its own.
    np.testing.assert_array_equal(buffer[np.array([3])].obs[0], np.full((4, 2, 2), 100, np.uint8))
    np.testing.assert_array_equal(buffer[np.array([2])].obs_next[0, -1], np.full((2, 2), 103, np.uint8))


def test_transition_recorder_rows_restore_and_cut(tmp_path: Path) -> None:
    recorder = TransitionRecorder()
    for step in range(5):
        recorder.add(np.full(3, step, np.float32), step % 2, 1.0, False, False, np.full(3, step + 1, np.float32))
    journal = CollectionJournal.open(tmp_path / "v.parts", SETTINGS, [TransitionRecorder(), TransitionRecorder()])
    journal.keep([recorder, TransitionRecorder()], [])  # the second env recorded nothing yet
    journal.release()
    restored = [TransitionRecorder(), TransitionRecorder()]
    CollectionJournal.open(tmp_path / "v.parts", SETTINGS, restored)
    arrays = restored[0].arrays()
    np.testing.assert_array_equal(arrays["obs"], recorder.arrays()["obs"])
    np.testing.assert_array_equal(arrays["act"], [0, 1, 0, 1, 0])
    assert arrays["truncated"].tolist() == [False] * 4 + [True] and len(restored[1]) == 0


def test_other_settings_are_refused_naming_the_flag(tmp_path: Path) -> None:
    journal = CollectionJournal.open(tmp_path / "x.parts", SETTINGS, [TransitionRecorder()])
    recorder = TransitionRecorder()
    recorder.add(np.zeros(2), 0, 0.0, False, False, np.zeros(2))
    journal.keep([recorder], [])
    journal.release()
    with pytest.raises(OfflineRLError, match=r"x\.parts: .*--eps-test 0\.2, not --eps-test 0\.1; .*delete"):
        CollectionJournal.open(tmp_path / "x.parts", {**SETTINGS, "--eps-test": 0.1}, [TransitionRecorder()])
    with pytest.raises(DatasetError, match="holds 1 envs' rows, expected 2"):
        CollectionJournal.open(tmp_path / "x.parts", SETTINGS, [TransitionRecorder(), TransitionRecorder()])


def test_a_missing_or_damaged_part_is_one_line(tmp_path: Path) -> None:
    directory = tmp_path / "x.parts"
    journal = CollectionJournal.open(directory, SETTINGS, [TransitionRecorder()])
    recorder = TransitionRecorder()
    for _ in range(2):
        recorder.add(np.zeros(2), 0, 0.0, False, False, np.zeros(2))
        journal.keep([recorder], [])
    journal.release()
    (directory / "part-00001.hdf5").write_bytes(b"not hdf5")
    with pytest.raises(DatasetError, match=r"part-00001\.hdf5: unreadable .*delete .*x\.parts"):
        CollectionJournal.open(directory, SETTINGS, [TransitionRecorder()])
    (directory / "part-00000.hdf5").unlink()
    with pytest.raises(DatasetError, match=r"part-00000\.hdf5 is missing"):
        CollectionJournal.open(directory, SETTINGS, [TransitionRecorder()])


def test_a_torn_part_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "x.parts"
    journal = CollectionJournal.open(directory, SETTINGS, [TransitionRecorder()])
    recorder = TransitionRecorder()
    recorder.add(np.zeros(2), 0, 0.0, False, False, np.zeros(2))
    recorder._rows["act"].append(np.array(1))  # an add stopped half-way
    journal.keep([recorder], [])
    journal.release()
    with pytest.raises(DatasetError, match=r"part-00000\.hdf5: env 0's columns differ in length"):
        CollectionJournal.open(directory, SETTINGS, [TransitionRecorder()])


def test_one_process_at_a_time_keeps_parts_in_a_folder(tmp_path: Path) -> None:
    """The same command started twice must not share (and one of them remove) the other's parts."""
    directory = tmp_path / "x.parts"
    journal = CollectionJournal.open(directory, SETTINGS, [TransitionRecorder()])
    holder = subprocess.run(  # another process, while this one holds the folder
        [
            sys.executable,
            "-c",
            "from offline_rl.core.files import FileLock; import sys; "
            f"print(FileLock(__import__('pathlib').Path({str(directory / '.lock')!r})).acquire(wait=False))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert holder.stdout.strip() == "False", holder.stderr
    with pytest.raises(OfflineRLError, match=r"x\.parts: another collection with this output is running"):
        CollectionJournal.open(directory, SETTINGS, [TransitionRecorder()])
    recorder = TransitionRecorder()
    recorder.add(np.zeros(2), 0, 0.0, False, False, np.zeros(2))
    journal.keep([recorder], [])
    journal.release()
    again = CollectionJournal.open(directory, SETTINGS, [TransitionRecorder()])
    assert again.transitions == 1
    again.release()
    assert directory.is_dir()  # its part stays for the next run
    CollectionJournal.open(tmp_path / "y.parts", SETTINGS, [TransitionRecorder()]).release()
    assert not (tmp_path / "y.parts").exists()  # a folder that kept nothing does not stay


def test_runs_started_together_generate_the_default_dataset_once(tmp_path: Path, monkeypatch, capsys) -> None:
    """Sweep trials share the cached random dataset: the second waits for the first's file."""
    import threading

    from offline_rl.core.files import FileLock
    from offline_rl.runs import dataset_generation, default_dataset

    monkeypatch.setenv("OFFLINE_RL_CACHE_DIR", str(tmp_path))
    path = default_dataset.default_dataset_path("Pendulum-v1", 300)
    generating = FileLock(path.with_name(f".{path.name}.lock"))
    assert generating.acquire(wait=False)  # the first run, generating
    found: list[Path] = []
    waiter = threading.Thread(target=lambda: found.append(default_dataset.ensure_random_dataset("Pendulum-v1", 300)))
    waiter.start()
    waiter.join(timeout=5)
    assert waiter.is_alive() and not found  # it waits ...
    dataset_generation.collect_dataset(dataset_generation.CollectConfig(task="Pendulum-v1", output=path, size=300))
    stamp = path.stat().st_mtime_ns
    generating.release()
    waiter.join(timeout=60)
    assert found == [path] and path.stat().st_mtime_ns == stamp  # ... then reads the file, unchanged
    out = capsys.readouterr().out
    assert "another run is generating" in out and "using the cached random-policy dataset" in out


def test_ctrl_c_waits_for_the_step_boundary_and_a_second_one_does_not() -> None:
    from offline_rl.core.interrupts import interrupts_between_steps

    with interrupts_between_steps() as stop_if_interrupted:
        stop_if_interrupted()  # nothing pressed: goes on
        os.kill(os.getpid(), signal.SIGINT)  # arrives "inside a step": deferred
        with pytest.raises(KeyboardInterrupt):
            stop_if_interrupted()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)  # pressed again: at once
            time.sleep(1)  # the handler runs at the next bytecode; the sleep is not reached in full
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


class InterruptAfter:
    """Wraps the collection's env maker: in the middle of the `limit`-th step of all envs together,
    the process receives SIGINT, as from Ctrl-C."""

    def __init__(self, make, limit: int) -> None:
        self.make, self.limit, self.steps = make, limit, 0

    def __call__(self, *args, **kwargs):
        env = self.make(*args, **kwargs)
        step = env.step

        def counted_step(action):
            self.steps += 1
            if self.steps == self.limit:
                os.kill(os.getpid(), signal.SIGINT)
            return step(action)

        env.step = counted_step
        return env


@pytest.mark.parametrize("task", ["CartPole-v1", "PongNoFrameskip-v4"])
def test_interrupted_collection_continues_when_run_again(
    task: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from offline_rl.examples import atari_qrdqn as atari_qrdqn_program
    from offline_rl.runs import discrete_collection

    monkeypatch.chdir(tmp_path)
    output = tmp_path / "data.hdf5"
    command = [
        "--task", task, "--watch", "--eps-test", "1.0", "--buffer-size", "600", "--training-num", "3",
        "--num-quantiles", "8", "--collect-checkpoint-every", "150", "--save-buffer-name", str(output),
    ]  # fmt: skip
    monkeypatch.setattr(
        discrete_collection, "make_discrete_env", InterruptAfter(discrete_collection.make_discrete_env, 400)
    )
    with pytest.raises(KeyboardInterrupt):
        atari_qrdqn_program.main(command)
    printed = capsys.readouterr().out
    # The step Ctrl-C arrived in is completed and recorded; the collection stops before the next one.
    assert "interrupted after 400 of 600 transitions, kept in" in printed and "run the same command again" in printed
    parts = sorted(path.name for path in journal_directory(output).glob("part-*"))
    assert parts == ["part-00000.hdf5", "part-00001.hdf5", "part-00002.hdf5"] and not output.exists()

    with pytest.raises(OfflineRLError, match=r"--eps-test 1\.0, not --eps-test 0\.5"):
        atari_qrdqn_program.main([*command, "--eps-test", "0.5"])

    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    summary = atari_qrdqn_program.main(command)
    assert "400 of 600 transitions were collected" in capsys.readouterr().out
    assert summary["transitions"] == 600 and not journal_directory(output).exists()
    buffer = load_buffer(output)
    assert len(buffer) == 600
    # Episodes are whole: within one, each next observation is the following step's observation,
    # including across the interruption, where each env's episode was closed as truncated.
    indices = np.arange(599)
    within = ~buffer.done[indices]
    np.testing.assert_array_equal(buffer[indices].obs_next[within], buffer[indices + 1].obs[within])
    assert buffer.truncated.sum() >= 6  # 3 envs cut by the interruption, 3 by the end of the data


def test_an_interrupted_write_of_the_file_is_finished_without_playing_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import offline_rl.data
    from offline_rl.examples import atari_qrdqn as atari_qrdqn_program
    from offline_rl.runs import discrete_collection

    output = tmp_path / "data.hdf5"
    command = [
        "--task", "CartPole-v1", "--watch", "--eps-test", "1.0", "--buffer-size", "300", "--training-num", "2",
        "--num-quantiles", "8", "--save-buffer-name", str(output), "--logdir", str(tmp_path / "log"),
    ]  # fmt: skip

    def interrupted_write(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(offline_rl.data, "save_buffer", interrupted_write)
    with pytest.raises(KeyboardInterrupt):
        atari_qrdqn_program.main(command)
    assert "interrupted while writing" in capsys.readouterr().out and not output.exists()

    monkeypatch.undo()
    counter = InterruptAfter(discrete_collection.make_discrete_env, limit=10**9)
    monkeypatch.setattr(discrete_collection, "make_discrete_env", counter)
    summary = atari_qrdqn_program.main(command)
    assert "300 of 300 transitions were collected" in capsys.readouterr().out
    assert counter.steps == 0 and summary["transitions"] == 300 and len(load_buffer(output)) == 300


def test_interrupted_continuous_collection_continues_with_whole_episodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m offline_rl.collect` keeps finished episodes; the same command continues from them."""
    import h5py

    from offline_rl.runs import dataset_generation
    from offline_rl.runs.dataset_generation import CollectConfig, collect_dataset

    def config(**changes):
        base = dict(task="Hopper-v4", output=tmp_path / "hopper.hdf5", size=900, num_envs=2, seed=3, progress=False)
        return CollectConfig(**{**base, "collect_checkpoint_every": 100, **changes})

    monkeypatch.setattr(dataset_generation, "make_env", InterruptAfter(dataset_generation.make_env, 500))
    with pytest.raises(KeyboardInterrupt):
        collect_dataset(config())
    printed = capsys.readouterr().out
    assert "interrupted after" in printed and "run the same command again" in printed
    assert journal_directory(tmp_path / "hopper.hdf5").is_dir() and not (tmp_path / "hopper.hdf5").exists()
    with pytest.raises(OfflineRLError, match=r"--num-envs 2, not --num-envs 3"):
        collect_dataset(config(num_envs=3))

    monkeypatch.undo()
    collect_dataset(config())
    kept = int(capsys.readouterr().out.split("continuing the collection kept in ")[1].split(": ")[1].split(" of ")[0])
    assert 0 < kept < 900 and not journal_directory(tmp_path / "hopper.hdf5").exists()
    with h5py.File(tmp_path / "hopper.hdf5", "r") as file:
        data = {key: file[key][()] for key in ("observations", "next_observations", "terminals", "timeouts")}
    ends = data["terminals"] | data["timeouts"]
    assert len(ends) == 900 and ends[kept - 1]  # the kept episodes end where the new ones start
    inside = np.flatnonzero(~ends)
    np.testing.assert_array_equal(data["next_observations"][inside], data["observations"][inside + 1])

    uninterrupted = collect_dataset(config(output=tmp_path / "once.hdf5"))
    without_parts = collect_dataset(config(output=tmp_path / "plain.hdf5", collect_checkpoint_every=0))
    with h5py.File(uninterrupted, "r") as one, h5py.File(without_parts, "r") as other:
        np.testing.assert_array_equal(one["observations"][()], other["observations"][()])  # parts change nothing


def test_an_interrupted_minari_collection_leaves_no_folder_and_continues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Minari dataset is a folder that appears whole: an interrupted collection leaves nothing at
    --output (before, an empty folder there made the same command refuse: "already exists"), and
    --output may be relative (Minari doubled a relative folder: a traceback after the collection)."""
    from offline_rl.data import load_minari
    from offline_rl.runs import dataset_generation
    from offline_rl.runs.dataset_generation import CollectConfig, collect_dataset

    monkeypatch.chdir(tmp_path)
    config = CollectConfig(
        task="Hopper-v4", output=Path("hopper-minari"), output_format="minari", size=600, seed=3,
        collect_checkpoint_every=100, progress=False,
    )  # fmt: skip
    with monkeypatch.context() as patched:
        patched.setattr(dataset_generation, "make_env", InterruptAfter(dataset_generation.make_env, 400))
        with pytest.raises(KeyboardInterrupt):
            collect_dataset(config)
    assert not (tmp_path / "hopper-minari").exists() and journal_directory(tmp_path / "hopper-minari").is_dir()
    (tmp_path / "hopper-minari").mkdir()  # what the code before left there: an empty folder holds nothing to lose
    collect_dataset(config)
    buffer = load_minari(tmp_path / "hopper-minari")
    assert len(buffer) == 600 and not journal_directory(tmp_path / "hopper-minari").exists()
