"""Minari datasets written with Minari's own `create_dataset_from_buffers` load back exactly."""

from __future__ import annotations

import warnings
from pathlib import Path

import gymnasium as gym
import minari
import numpy as np
import pytest
from minari.data_collector import EpisodeBuffer

from conftest import record_minari_dataset
from offline_rl.core.errors import DatasetError
from offline_rl.data import dataset_info, load_dataset, load_minari


def _episodes(rng: np.random.Generator, specs: list[tuple[int, str]], make_obs) -> list[EpisodeBuffer]:
    episodes = []
    for index, (length, end) in enumerate(specs):
        terminations = np.zeros(length, dtype=bool)
        truncations = np.zeros(length, dtype=bool)
        (terminations if end == "terminated" else truncations)[-1] = True
        episodes.append(
            EpisodeBuffer(
                id=index,
                observations=make_obs(length + 1),
                actions=rng.uniform(-1, 1, size=(length, 2)).astype(np.float32),
                rewards=rng.normal(size=length),
                terminations=terminations,
                truncations=truncations,
                infos={},
            )
        )
    return episodes


def _create(dataset_id: str, episodes: list[EpisodeBuffer], obs_space: gym.Space) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        minari.create_dataset_from_buffers(
            dataset_id,
            episodes,
            env="Pendulum-v1",  # reference scores are only stored for datasets tied to an env
            observation_space=obs_space,
            action_space=gym.spaces.Box(-1, 1, (2,), np.float32),
            ref_min_score=-5.0,
            ref_max_score=15.0,
        )


SPECS = [(5, "terminated"), (3, "truncated"), (4, "terminated"), (2, "truncated")]


def test_round_trip_keeps_terminations_truncations_and_true_next_obs(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    box = gym.spaces.Box(-10, 10, (3,), np.float32)
    episodes = _episodes(rng, SPECS, lambda n: rng.normal(size=(n, 3)).astype(np.float32))
    _create("test/pointmass/mixed-v0", episodes, box)
    by_id = load_minari("test/pointmass/mixed-v0")
    by_dir = load_minari(tmp_path / "minari" / "test" / "pointmass" / "mixed-v0")
    detected = load_dataset("test/pointmass/mixed-v0")
    for buffer in (by_id, by_dir, detected):
        assert len(buffer) == 14
        np.testing.assert_array_equal(buffer.obs, np.concatenate([e.observations[:-1] for e in episodes]))
        np.testing.assert_array_equal(buffer.obs_next, np.concatenate([e.observations[1:] for e in episodes]))
        np.testing.assert_array_equal(buffer.act, np.concatenate([e.actions for e in episodes]))
        np.testing.assert_allclose(buffer.rew, np.concatenate([e.rewards for e in episodes]).astype(np.float32))
        np.testing.assert_array_equal(buffer.terminated, np.concatenate([e.terminations for e in episodes]))
        np.testing.assert_array_equal(buffer.truncated, np.concatenate([e.truncations for e in episodes]))
    info = dataset_info(by_id)
    assert (info["ref_min_score"], info["ref_max_score"]) == (-5.0, 15.0)
    assert info["name"] == "test/pointmass/mixed-v0"


def test_dict_observations_are_flattened_in_sorted_key_order() -> None:
    rng = np.random.default_rng(1)
    space = gym.spaces.Dict(
        {
            "velocity": gym.spaces.Box(-1, 1, (2,), np.float32),
            "position": gym.spaces.Box(-1, 1, (3,), np.float32),
        }
    )

    def make_obs(n: int) -> dict[str, np.ndarray]:
        return {
            "velocity": rng.normal(size=(n, 2)).astype(np.float32),
            "position": rng.normal(size=(n, 3)).astype(np.float32),
        }

    episodes = _episodes(rng, SPECS[:2], make_obs)
    _create("test/dictenv/flat-v0", episodes, space)
    buffer = load_minari("test/dictenv/flat-v0")
    expected = np.concatenate(
        [np.concatenate([e.observations["position"], e.observations["velocity"]], axis=1)[:-1] for e in episodes]
    )
    np.testing.assert_array_equal(buffer.obs, expected)
    # The same order gymnasium uses to flatten such a space, so a FlattenObservation env matches.
    sample = {"velocity": np.array([1, 2], np.float32), "position": np.array([3, 4, 5], np.float32)}
    np.testing.assert_array_equal(gym.spaces.flatten(space, sample), [3, 4, 5, 1, 2])


def test_tuple_observations_are_flattened_in_position_order() -> None:
    rng = np.random.default_rng(2)
    space = gym.spaces.Tuple((gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Box(-1, 1, (1,), np.float32)))

    def make_obs(n: int) -> tuple[np.ndarray, np.ndarray]:
        return rng.normal(size=(n, 2)).astype(np.float32), rng.normal(size=(n, 1)).astype(np.float32)

    episodes = _episodes(rng, SPECS[:2], make_obs)
    _create("test/tupleenv/flat-v0", episodes, space)
    buffer = load_minari("test/tupleenv/flat-v0")
    expected = [np.concatenate(e.observations, axis=1) for e in episodes]
    np.testing.assert_array_equal(buffer.obs, np.concatenate([flat[:-1] for flat in expected]))
    np.testing.assert_array_equal(buffer.obs_next, np.concatenate([flat[1:] for flat in expected]))
    sample = (np.array([1, 2], np.float32), np.array([3], np.float32))  # gymnasium's order, as FlattenObservation
    np.testing.assert_array_equal(gym.spaces.flatten(space, sample), [1, 2, 3])


def test_an_episode_stored_unfinished_ends_truncated_and_is_not_bridged() -> None:
    """Minari keeps whatever ends an episode was given: one with neither flag at its last step (a
    collector stopped mid-episode) must still end there, or the next episode's start would be its
    successor."""
    rng = np.random.default_rng(3)
    box = gym.spaces.Box(-10, 10, (3,), np.float32)
    specs = [(4, "terminated"), (3, "truncated"), (2, "terminated")]
    episodes = _episodes(rng, specs, lambda n: rng.normal(size=(n, 3)).astype(np.float32))
    episodes[1].truncations[-1] = False  # the second episode stored unfinished
    _create("test/pointmass/unfinished-v0", episodes, box)
    buffer = load_minari("test/pointmass/unfinished-v0")
    assert buffer.truncated.tolist() == [False] * 4 + [False, False, True] + [False, False]
    assert buffer.terminated.tolist() == [False, False, False, True] + [False] * 3 + [False, True]
    np.testing.assert_array_equal(buffer.obs_next[6], episodes[1].observations[-1])  # its own last observation


@pytest.mark.parametrize(
    ("space", "expected"),
    [
        (gym.spaces.Discrete(16), "observation_space is Discrete(16); expected Box, or Dict/Tuple of Boxes"),
        (
            gym.spaces.Dict({"cell": gym.spaces.Discrete(4), "pose": gym.spaces.Box(-1, 1, (2,), np.float32)}),
            "unsupported observation space Discrete(4); expected Box, or Dict/Tuple of Boxes",
        ),
    ],
)
def test_observations_that_are_not_boxes_are_refused_in_one_line(space: gym.Space, expected: str) -> None:
    rng = np.random.default_rng(4)
    samples = [space.sample() for _ in range(4)]
    if isinstance(space, gym.spaces.Dict):
        observations = {key: np.stack([sample[key] for sample in samples]) for key in space}
    else:
        observations = np.array(samples)
    episodes = _episodes(rng, [(3, "terminated")], lambda n: observations)
    _create("test/gridworld/cells-v0", episodes, space)
    with pytest.raises(DatasetError) as caught:
        load_minari("test/gridworld/cells-v0")
    assert str(caught.value) == f"Minari dataset 'test/gridworld/cells-v0': {expected}"


def test_missing_dataset_id_names_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as caught:
        load_minari("mujoco/halfcheetah/medium-v0")
    assert str(tmp_path / "minari") in str(caught.value)
    assert "download" in str(caught.value)


def test_a_misspelt_id_of_a_dataset_that_is_here_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from offline_rl.core.errors import DownloadError
    from offline_rl.data.download import PROXY_VARIABLES

    rng = np.random.default_rng(1)
    box = gym.spaces.Box(-10, 10, (3,), np.float32)
    _create("test/pointmass/mixed-v0", _episodes(rng, SPECS, lambda n: rng.normal(size=(n, 3)).astype(np.float32)), box)
    with pytest.raises(DatasetError, match=r"; did you mean 'test/pointmass/mixed-v0' \(here\)\? else pass download"):
        load_minari("test/pointmas/mixed-v0")
    with pytest.raises(DatasetError) as caught:  # nothing near it here: no guess
        load_minari("mujoco/halfcheetah/medium-v0")
    assert "did you mean" not in str(caught.value)
    for name in PROXY_VARIABLES:  # with --download and no network: the same guess
        monkeypatch.delenv(name, raising=False)

    def no_network(*args, **kwargs):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "create_connection", no_network)
    with pytest.raises(DownloadError, match=r"; did you mean 'test/pointmass/mixed-v0' \(here\)\? else copy"):
        load_minari("test/pointmas/mixed-v0", download=True)


def test_directory_that_is_not_a_dataset(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="not a Minari dataset directory"):
        load_minari(tmp_path / "empty")


def test_no_network_fails_at_once_in_one_line_before_minari_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    import minari

    from offline_rl.core.errors import DownloadError
    from offline_rl.data import load_minari
    from offline_rl.data.download import PROXY_VARIABLES

    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)

    def no_network(*args, **kwargs):
        raise socket.gaierror(-2, "Name or service not known")

    def retrying_download(*args, **kwargs):
        raise AssertionError("Minari's download (and its retries) must not start without a network")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(minari, "load_dataset", retrying_download)
    with pytest.raises(DownloadError) as caught:
        load_minari("mujoco/hopper/medium-v0", download=True)
    message = str(caught.value)
    assert "cannot reach huggingface.co" in message and "mujoco/hopper/medium-v0" in message and "\n" not in message


def test_evaluation_uses_the_env_settings_the_dataset_records() -> None:
    import dataclasses

    from offline_rl.cli.continuous_data import make_continuous_env
    from offline_rl.envs.make import recorded_evaluation_spec

    low_gravity = dataclasses.replace(gym.spec("Pendulum-v1"), kwargs={"g": 3.0})
    record_minari_dataset("test/pendulum/low-gravity-v0", gym.make("Pendulum-v1"), 60, low_gravity)
    info = dataset_info(load_minari("test/pendulum/low-gravity-v0"))
    spec = recorded_evaluation_spec("Pendulum-v1", info)
    assert spec is not None and spec.kwargs == {"g": 3.0}
    assert make_continuous_env("Pendulum-v1", spec).unwrapped.g == 3.0
    assert recorded_evaluation_spec("InvertedPendulum-v4", info) is None  # another task: its registered settings
    assert make_continuous_env("Pendulum-v1").unwrapped.g == 10.0


def test_the_example_evaluates_a_minari_maze_on_its_recorded_env(tmp_path: Path) -> None:
    """Minari's D4RL mazes are Gymnasium-Robotics envs with dict observations, and their evaluation
    env fixes the start and the goal (`r` and `g` cells) where the registered id draws both."""
    import dataclasses

    from conftest import run_in_process
    from offline_rl.envs.make import make_env

    make_env("AntMaze_UMaze-v5")  # registers Gymnasium-Robotics (a test dependency)
    fixed = [[1, 1, 1, 1, 1], [1, "r", 0, 0, 1], [1, 1, 1, 0, 1], [1, "g", 0, 0, 1], [1, 1, 1, 1, 1]]
    spec = gym.spec("AntMaze_UMaze-v5")
    evaluation = dataclasses.replace(spec, kwargs={**spec.kwargs, "maze_map": fixed, "continuing_task": True})
    recording = gym.wrappers.FlattenObservation(gym.make("AntMaze_UMaze-v5"))
    recording.reset(seed=1)
    flat = recording.step(np.zeros(8, np.float32))[0]
    record_minari_dataset("D4RL/antmaze/test-v0", gym.make("AntMaze_UMaze-v5"), 120, evaluation)
    buffer = load_minari("D4RL/antmaze/test-v0")
    assert buffer.obs.shape[1:] == flat.shape  # achieved goal, desired goal, observation: FlattenObservation's layout
    result = run_in_process(
        "examples/d4rl_cql.py",
        *("--task", "AntMaze_UMaze-v5", "--dataset", "D4RL/antmaze/test-v0", "--epoch", "1", "--step-per-epoch", "2"),
        *("--test-num", "1", "--batch-size", "16", "--hidden-sizes", "16", "--critic-layers", "1"),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "evaluation env: AntMaze_UMaze-v5 as the dataset records it (" in result.stdout
    assert "'g'" in result.stdout and "continuing_task=True" in result.stdout
    assert "last evaluation return" in result.stdout
    # --watch has no data: the checkpoint's record of it gives the same evaluation env.
    (policy,) = (tmp_path / "log").rglob("policy.pth")
    watched = run_in_process("examples/d4rl_cql.py", "--watch", "--resume-path", str(policy), cwd=tmp_path)
    assert watched.returncode == 0, watched.stderr[-2000:]
    assert "evaluation env: AntMaze_UMaze-v5 as the dataset records it (" in watched.stdout
    # Another version of the maze does not fit, and the error names the one the data records.
    other = run_in_process(
        "examples/d4rl_cql.py", "--task", "AntMaze_UMaze-v4", "--dataset", "D4RL/antmaze/test-v0", cwd=tmp_path
    )
    assert other.returncode == 2 and "Traceback" not in other.stderr
    assert other.stderr.strip().splitlines()[-1] == (
        "error: D4RL/antmaze/test-v0: observations have shape (109,), but --task AntMaze_UMaze-v4 observes (31,); "
        "it was recorded on AntMaze_UMaze-v5: give --task AntMaze_UMaze-v5"
    )


def test_a_recorded_env_whose_module_is_missing_is_one_line() -> None:
    import dataclasses

    from offline_rl.core.errors import OfflineRLError
    from offline_rl.envs.make import make_env

    elsewhere = dataclasses.replace(gym.spec("Pendulum-v1"), entry_point="gymnasium_robotics_x.envs:PendulumEnv")
    with pytest.raises(OfflineRLError, match=r"the env spec names 'gymnasium_robotics_x.envs:PendulumEnv', outside"):
        make_env("Pendulum-v1", spec=elsewhere)
    elsewhere = dataclasses.replace(elsewhere, entry_point="ale_py.no_such_module:PendulumEnv")  # trusted, missing
    with pytest.raises(OfflineRLError, match=r"--task 'Pendulum-v1': its env's module is not installed \(No module"):
        make_env("Pendulum-v1", spec=elsewhere)


def test_discrete_cql_evaluates_a_vector_task_as_the_dataset_records_it(tmp_path: Path) -> None:
    """atari_cql.py evaluates on the settings a Minari dataset of a vector task records, as d4rl_cql.py
    does: Sutton and Barto's CartPole reward pays 0 a step and -1 at the fall, so every return is 0 or
    -1, where the registered CartPole-v1 pays 1 a step (before, atari_cql.py evaluated there)."""
    import dataclasses
    import re

    from conftest import run_in_process

    evaluation = dataclasses.replace(gym.spec("CartPole-v1"), kwargs={"sutton_barto_reward": True})
    record_minari_dataset(
        "test/cartpole/sutton-barto-v0", gym.make("CartPole-v1", sutton_barto_reward=True), 300, evaluation
    )
    budget = ("--epoch", "1", "--step-per-epoch", "5", "--test-num", "3", "--num-quantiles", "8")
    result = run_in_process(
        "examples/atari_cql.py", "--load-buffer-name", "test/cartpole/sutton-barto-v0", *budget, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "evaluation env: CartPole-v1 as the dataset records it (sutton_barto_reward=True)" in result.stdout
    returns = [float(value) for value in re.findall(r"return (-?[\d.]+) ±", result.stdout)]
    assert returns and all(-1.0 <= value <= 0.0 for value in returns), result.stdout
    # --watch has no data: the checkpoint's record of it gives the same evaluation env.
    (policy,) = (tmp_path / "log").rglob("policy.pth")
    watched = run_in_process("examples/atari_cql.py", "--watch", "--resume-path", str(policy), cwd=tmp_path)
    assert watched.returncode == 0, watched.stderr[-2000:]
    assert "evaluation env: CartPole-v1 as the dataset records it (sutton_barto_reward=True)" in watched.stdout


@pytest.mark.parametrize(
    ("damage", "by_id", "by_folder"),
    [
        ("metadata: not JSON", "unreadable (Expecting property name", "unreadable Minari dataset (Expecting"),
        ("metadata: no keys", "unreadable (AssertionError)", "unreadable Minari dataset (AssertionError)"),
        ("data: not HDF5", "cannot be read (Unable to", "cannot be read (Unable to"),
        ("data: cut in half", "cannot be read (Unable to", "cannot be read (Unable to"),
    ],
)
def test_a_damaged_dataset_is_one_line_naming_where_it_is(
    tmp_path: Path, damage: str, by_id: str, by_folder: str
) -> None:
    """A dataset cut short by a failed copy or with metadata edited by hand: a DatasetError (one line from
    the command), not a traceback from Minari or h5py."""
    rng = np.random.default_rng(0)
    box = gym.spaces.Box(-10, 10, (3,), np.float32)
    _create("test/pointmass/damaged-v0", _episodes(rng, SPECS, lambda n: rng.normal(size=(n, 3))), box)
    folder = tmp_path / "minari" / "test" / "pointmass" / "damaged-v0"
    metadata, data = folder / "data" / "metadata.json", folder / "data" / "main_data.hdf5"
    assert metadata.is_file() and data.is_file()
    if damage == "metadata: not JSON":
        metadata.write_text("{not json")
    elif damage == "metadata: no keys":
        metadata.write_text("{}")
    elif damage == "data: not HDF5":
        data.write_bytes(b"not an HDF5 file")
    else:
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    for source, expected in (("test/pointmass/damaged-v0", by_id), (folder, by_folder)):
        with pytest.raises(DatasetError) as caught:
            load_minari(source)
        message = str(caught.value)
        assert expected in message and str(folder) in message and "\n" not in message, message


def test_a_datasets_folder_that_is_a_file_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Minari creates its datasets folder on every look-up: a variable naming a file made it raise a bare
    FileExistsError."""
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "not-a-folder"))
    with pytest.raises(DatasetError, match=r"not-a-folder: a file, not a folder; set MINARI_DATASETS_PATH to a folder"):
        load_minari("mujoco/hopper/medium-v0")
