"""`python -m offline_rl.describe`: each format described from its loader, with the data's normalised score
computed by hand here, and a training command that the named example accepts as printed."""

from __future__ import annotations

import shlex
from pathlib import Path

import gymnasium as gym
import h5py
import numpy as np
import pytest

from conftest import (
    episodes_to_arrays,
    record_minari_dataset,
    run_in_process,
    synthetic_frame_stack_buffer,
    write_d4rl_file,
)
from offline_rl.cli import atari_cql, d4rl_cql
from offline_rl.data import save_buffer
from offline_rl.data.transitions import make_replay_buffer

EXAMPLES = {"examples/d4rl_cql.py": d4rl_cql.config_from_args, "examples/atari_cql.py": atari_cql.config_from_args}


def described(*sources: str, cwd: Path) -> list[str]:
    done = run_in_process("-m offline_rl.describe", *sources, cwd=cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()


def line_of(lines: list[str], start: str) -> str:
    (line,) = [line for line in lines if line.startswith(start)]
    return line


def parses_as_printed(train_line: str) -> str:
    """The printed command's example, after its flags parsed as that example parses them."""
    words = shlex.split(train_line.removeprefix("train: "))
    assert words[0] == "python", train_line
    EXAMPLES[words[1]](words[2:])
    return words[1]


def test_a_named_d4rl_file_gets_its_env_and_the_datas_normalised_score(tmp_path: Path) -> None:
    arrays = episodes_to_arrays([3, 2], ["terminal", "timeout"], obs_dim=11, act_dim=3)
    arrays["rewards"] = np.array([100.0, 100.0, 100.0, 50.0, 50.0], dtype=np.float32)  # returns 300 and 100
    write_d4rl_file(tmp_path / "d4rl" / "hopper_medium-v2.hdf5", **arrays)

    lines = described("hopper-medium-v2", cwd=tmp_path)

    assert lines[0] == "hopper-medium-v2: D4RL-format HDF5 file, dataset hopper-medium-v2"
    assert line_of(lines, "env: ").startswith("env: Hopper-v")
    assert "is D4RL data of gym's Hopper" in line_of(lines, "env: ")
    assert line_of(lines, "observations: ") == "observations: (11,) float32"
    assert line_of(lines, "actions: ").startswith("actions: continuous, (3,) float32, in [")
    assert line_of(lines, "episode ends: ") == "episode ends: 1 terminated, 1 truncated"
    expected = 100 * (200.0 - -20.272305) / (3234.3 - -20.272305)  # D4RL's hopper references
    assert line_of(lines, "normalized score") == (
        f"normalized score of the data's mean return: {expected:.1f} (references: random -20.3, expert 3234.3)"
    )
    train = line_of(lines, "train: ")
    assert train == "train: python examples/d4rl_cql.py --dataset hopper-medium-v2"
    assert parses_as_printed(train) == "examples/d4rl_cql.py"


def test_discrete_data_points_to_discrete_cql_and_counts_its_actions(tmp_path: Path) -> None:
    collected = run_in_process(
        "-m offline_rl.collect", "--task", "CartPole-v1", "--output", "cart pole.hdf5", "--size", "300", cwd=tmp_path
    )
    assert collected.returncode == 0, collected.stderr[-2000:]
    with h5py.File(tmp_path / "cart pole.hdf5", "r") as file:
        counts = np.bincount(np.asarray(file["actions"]))

    lines = described("cart pole.hdf5", cwd=tmp_path)

    assert line_of(lines, "env: ") == "env: CartPole-v1 (it was recorded on CartPole-v1)"
    assert line_of(lines, "actions: ") == (
        f"actions: discrete, indices 0 to 1 (2 used; the commonest {100 * counts.max() / 300:.1f}% of steps)"
    )
    assert line_of(lines, "transitions: ") == "transitions: 300"
    assert not [line for line in lines if line.startswith("normalized score")]  # CartPole has no references
    train = line_of(lines, "train: ")
    assert train == "train: python examples/atari_cql.py --load-buffer-name 'cart pole.hdf5'"
    assert parses_as_printed(train) == "examples/atari_cql.py"


def test_a_buffer_that_records_no_env_says_training_needs_the_task(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(40, 5)).astype(np.float32)
    buffer = make_replay_buffer(
        obs=obs,
        act=rng.uniform(-3, 2, size=(40, 2)).astype(np.float32),
        rew=np.ones(40, dtype=np.float32),
        terminated=np.arange(40) % 10 == 9,
        truncated=np.zeros(40, dtype=bool),
        obs_next=np.roll(obs, -1, axis=0),
    )
    buffer.save_hdf5(str(tmp_path / "plain.hdf5"))  # Tianshou's own writer: no metadata of ours

    lines = described("plain.hdf5", cwd=tmp_path)

    assert lines[0] == "plain.hdf5: Tianshou buffer"
    assert line_of(lines, "env: ") == "env: none recorded (training needs --task with the env it was recorded on)"
    low, high = buffer.act.min(), buffer.act.max()
    assert line_of(lines, "actions: ") == f"actions: continuous, (2,) float32, in [{low:.3f}, {high:.3f}]"
    assert line_of(lines, "episodes: ") == "episodes: 4 (mean length 10.0)"
    train = line_of(lines, "train: ")
    assert train == "train: python examples/d4rl_cql.py --dataset plain.hdf5 --task <env>"
    assert parses_as_printed(train.replace("<env>", "Pendulum-v1")) == "examples/d4rl_cql.py"


def test_a_frame_stack_buffer_is_described_by_its_stacks_and_their_padding(tmp_path: Path) -> None:
    save_buffer(synthetic_frame_stack_buffer(300, seed=0), tmp_path / "frames.hdf5")

    lines = described("frames.hdf5", cwd=tmp_path)

    assert line_of(lines, "observations: ") == (
        "observations: (4, 84, 84) uint8; stacks padded with an episode's first frame repeated (gymnasium's "
        "FrameStackObservation)"
    )
    assert line_of(lines, "actions: ").startswith("actions: discrete, indices 0 to 5 (6 used;")
    assert line_of(lines, "episode ends: ") == "episode ends: 3 terminated, 0 truncated"
    assert (
        line_of(lines, "train: ") == "train: python examples/atari_cql.py --load-buffer-name frames.hdf5 --task <env>"
    )


def test_a_minari_dataset_gets_its_references_and_several_sources_are_described_in_turn(tmp_path: Path) -> None:
    episodes = record_minari_dataset(
        "test/pendulum/describe-v0",
        gym.make("Pendulum-v1"),
        250,
        gym.spec("Pendulum-v1"),
        ref_min_score=-1500.0,
        ref_max_score=-100.0,
    )
    returns = [float(np.sum(episode.rewards)) for episode in episodes]
    d4rl_arrays = episodes_to_arrays([4], ["timeout"])
    write_d4rl_file(tmp_path / "local.hdf5", **d4rl_arrays)

    lines = described("test/pendulum/describe-v0", "local.hdf5", cwd=tmp_path)

    first, second = lines[: lines.index("")], lines[lines.index("") + 1 :]
    assert first[0] == "test/pendulum/describe-v0: Minari dataset, dataset test/pendulum/describe-v0"
    assert line_of(first, "env: ") == "env: Pendulum-v1 (it was recorded on Pendulum-v1)"
    expected = 100 * (np.mean(returns) - -1500.0) / (-100.0 - -1500.0)
    assert line_of(first, "normalized score") == (
        f"normalized score of the data's mean return: {expected:.1f} (references: random -1500.0, expert -100.0)"
    )
    assert second[0] == "local.hdf5: D4RL-format HDF5 file, dataset local"
    assert line_of(second, "transitions: ") == "transitions: 4"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("walker2d-medium-v2", "walker2d_medium-v2.hdf5; pass download=True (--download) to fetch it"),
        ("notes.txt", "notes.txt: not an HDF5 file"),
        ("missing.hdf5", "missing.hdf5: no such file or directory"),
    ],
)
def test_what_cannot_be_read_is_one_line_and_exit_status_2(tmp_path: Path, source: str, expected: str) -> None:
    (tmp_path / "notes.txt").write_text("not a dataset\n")
    done = run_in_process("-m offline_rl.describe", source, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith("error: ") and expected in done.stderr
    assert not (tmp_path / "d4rl").exists()  # nothing was fetched


def test_a_minari_dataset_of_atari_screens_is_described_as_atari_cql_stacks_it(tmp_path: Path) -> None:
    from test_minari_atari import recorded_spec

    from offline_rl.envs.make import make_env

    spec = recorded_spec("Breakout")
    recording = make_env(spec.id, spec=spec)
    record_minari_dataset("atari/breakout/describe-v0", recording, 60, None, jpeg_encoding=False)
    recording.close()

    assert_atari_description(
        "atari/breakout/describe-v0",
        tmp_path,
        "Minari dataset of Atari screens, dataset atari/breakout/describe-v0",
        "ALE/Breakout-v5",
        "ALE's RGB screens, converted to 84×84 grayscale frames; stacks padded with an episode's first frame "
        "repeated (gymnasium's FrameStackObservation)",
    )


def assert_atari_description(source: str, cwd: Path, heading: str, game: str, observations: str) -> None:
    """The lines an Atari dataset gets: its heading, its game, its stacks, and a command atari_cql.py takes."""
    lines = described(source, cwd=cwd)
    assert lines[0] == f"{source}: {heading}"
    assert line_of(lines, "env: ") == f"env: {game} (it was recorded on {game})"
    assert line_of(lines, "observations: ") == f"observations: (4, 84, 84) uint8; {observations}"
    train = line_of(lines, "train: ")
    assert train == f"train: python examples/atari_cql.py --load-buffer-name {source}"
    assert parses_as_printed(train) == "examples/atari_cql.py"


def test_a_d3rlpy_file_named_after_a_d4rl_dataset_gets_its_references(tmp_path: Path) -> None:
    from test_d3rlpy import episode, write_d3rlpy_episodes

    write_d3rlpy_episodes(tmp_path / "halfcheetah-medium-v2.h5", [episode(4, True, 0.0), episode(3, False, 10.0)])
    # rewards numbered from each episode's start; an unfinished episode's last step has no next
    # observation in d3rlpy's layout, so it is not a transition
    returns = [0 + 1 + 2 + 3, 10 + 11]

    lines = described("halfcheetah-medium-v2.h5", cwd=tmp_path)

    assert lines[0] == "halfcheetah-medium-v2.h5: d3rlpy dataset file, dataset halfcheetah-medium-v2"
    assert line_of(lines, "transitions: ") == "transitions: 6"
    assert line_of(lines, "env: ").startswith("env: HalfCheetah-v4 (it is D4RL data of gym's HalfCheetah")  # by name
    expected = 100 * (np.mean(returns) - -280.178953) / (12135.0 - -280.178953)  # D4RL's halfcheetah references
    assert line_of(lines, "normalized score") == (
        f"normalized score of the data's mean return: {expected:.1f} (references: random -280.2, expert 12135.0)"
    )
    assert line_of(lines, "train: ") == "train: python examples/d4rl_cql.py --dataset halfcheetah-medium-v2.h5"


def test_a_converted_dqn_replay_checkpoint_names_its_game_and_frame_padding(tmp_path: Path) -> None:
    from test_dqn_replay import convert_folder, three_checkpoints

    folder = tmp_path / "Pong" / "1" / "replay_logs"
    folder.mkdir(parents=True)
    three_checkpoints(folder)
    assert convert_folder(folder, tmp_path / "buffers").returncode == 0

    assert_atari_description(
        "buffers/ckpt_1.hdf5",
        tmp_path,
        "Tianshou buffer, dataset Pong/1/ckpt.1",
        "ALE/Pong-v5",
        "stacks padded with black frames before an episode's first (Dopamine's, so DQN Replay's and RL Unplugged's)",
    )
