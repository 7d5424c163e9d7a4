"""Local dataset generation: D4RL format, exact episode ends, reproducibility, atomic writes."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from conftest import REPO_ROOT, run_in_process
from offline_rl.algorithms.export.policy_file import PolicyNetwork, save_policy
from offline_rl.data import dataset_info, load_d4rl, load_minari
from offline_rl.runs.dataset_generation import CollectConfig, collect_dataset
from offline_rl.runs.default_dataset import default_dataset_path, ensure_random_dataset

D4RL_KEYS = {"observations", "actions", "rewards", "terminals", "timeouts", "next_observations", "metadata"}


def _read(path: Path) -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as file:
        return {key: file[key][()] for key in file if key != "metadata"}


def test_hopper_random_dataset_has_exact_episode_ends(tmp_path: Path) -> None:
    path = collect_dataset(
        CollectConfig(task="Hopper-v4", output=tmp_path / "hopper.hdf5", size=600, num_envs=3, seed=1, progress=False)
    )
    with h5py.File(path, "r") as file:
        assert set(file.keys()) == D4RL_KEYS
        assert file["metadata/task"][()].decode() == "Hopper-v4"
        assert file["metadata/policy"][()].decode() == "random"
        assert int(file["metadata/seed"][()]) == 1
    data = _read(path)
    assert len(data["observations"]) == 600
    ends = data["terminals"] | data["timeouts"]
    assert data["terminals"].sum() > 5  # random hopper falls over quickly
    assert ends[-1]
    # Inside an episode the successor is the next row; at an end it is the env's true final obs.
    inside = np.flatnonzero(~ends)
    np.testing.assert_array_equal(data["next_observations"][inside], data["observations"][inside + 1])
    at_end = np.flatnonzero(ends[:-1])
    assert not np.any(np.all(data["next_observations"][at_end] == data["observations"][at_end + 1], axis=1))
    assert np.all(np.abs(data["actions"]) <= 1.0)


def test_collector_output_loads_back_identically(tmp_path: Path) -> None:
    path = collect_dataset(
        CollectConfig(task="Pendulum-v1", output=tmp_path / "p.hdf5", size=450, num_envs=2, progress=False)
    )
    data = _read(path)
    buffer = load_d4rl(path)
    np.testing.assert_array_equal(buffer.obs, data["observations"])
    np.testing.assert_array_equal(buffer.act, data["actions"])
    np.testing.assert_array_equal(buffer.rew, data["rewards"])
    np.testing.assert_array_equal(buffer.obs_next, data["next_observations"])
    np.testing.assert_array_equal(buffer.terminated, data["terminals"])
    np.testing.assert_array_equal(buffer.truncated, data["timeouts"])
    # 2 envs x 225 steps: two finished 200-step episodes, then the two running ones cut at 25.
    assert data["timeouts"].sum() == 4 and not data["terminals"].any()
    info = dataset_info(buffer)
    assert info["task"] == "Pendulum-v1" and info["name"] == "Pendulum-v1-random"


def test_same_seed_same_data_other_seed_other_data(tmp_path: Path) -> None:
    def run(name: str, seed: int) -> dict[str, np.ndarray]:
        config = CollectConfig(
            task="Pendulum-v1",
            output=tmp_path / name,
            size=300,
            num_envs=2,
            seed=seed,
            progress=False,
        )
        return _read(collect_dataset(config))

    first, again, other = run("a.hdf5", 7), run("b.hdf5", 7), run("c.hdf5", 8)
    for key in first:
        np.testing.assert_array_equal(first[key], again[key], err_msg=key)
    assert not np.array_equal(first["actions"], other["actions"])


def _constant_policy(tmp_path: Path, obs_dim: int, act_value: float, low: float, high: float) -> Path:
    policy = PolicyNetwork(obs_dim, 1, [8], action_low=np.array([low]), action_high=np.array([high]))
    with torch.no_grad():
        for parameter in policy.mlp.parameters():
            parameter.zero_()
        squashed = (act_value - low) / (high - low) * 2 - 1
        policy.mlp[-1].bias.fill_(float(np.arctanh(squashed)))
    return save_policy(policy, tmp_path / "policy.pt")


def test_saved_policy_with_and_without_gaussian_noise(tmp_path: Path) -> None:
    policy_path = _constant_policy(tmp_path, obs_dim=3, act_value=0.5, low=-2.0, high=2.0)
    exact = _read(
        collect_dataset(
            CollectConfig(
                task="Pendulum-v1",
                output=tmp_path / "exact.hdf5",
                size=200,
                policy=str(policy_path),
                progress=False,
            )
        )
    )
    np.testing.assert_allclose(exact["actions"], 0.5, atol=1e-5)
    noisy = _read(
        collect_dataset(
            CollectConfig(
                task="Pendulum-v1",
                output=tmp_path / "noisy.hdf5",
                size=4000,
                policy=str(policy_path),
                noise_std=0.1,
                num_envs=4,
                progress=False,
            )
        )
    )
    # noise_std is a fraction of the half-range (2.0): std 0.2 around 0.5, far from the bounds.
    assert abs(noisy["actions"].mean() - 0.5) < 0.02
    assert abs(noisy["actions"].std() - 0.2) < 0.02


def test_a_policy_file_says_which_task_it_acts_in_and_collections_check_it(tmp_path: Path) -> None:
    """Pendulum's policy takes 3 numbers and gives 1 action; InvertedPendulum observes 4 and takes 1:
    before, that was a matrix-shape traceback in the middle of the collection."""
    import warnings

    from offline_rl.algorithms.export.policy_file import load_policy
    from offline_rl.core.errors import OfflineRLError
    from offline_rl.data.fit import TaskMismatchWarning

    unnamed = load_policy(_constant_policy(tmp_path, obs_dim=3, act_value=0.5, low=-2.0, high=2.0))
    assert unnamed.task is None  # files written before the field, or by hand, still load
    unnamed.task = "Pendulum-v1"
    policy_path = save_policy(unnamed, tmp_path / "pendulum.pt")
    assert load_policy(policy_path).task == "Pendulum-v1"

    def collect(task: str) -> Path:
        output = tmp_path / f"{task}.hdf5"
        return collect_dataset(
            CollectConfig(task=task, output=output, size=50, policy=str(policy_path), overwrite=True, progress=False)
        )

    with warnings.catch_warnings():
        warnings.simplefilter("error", TaskMismatchWarning)
        collect("Pendulum-v1")  # where it learned to act: no warning
    with pytest.raises(OfflineRLError) as error:
        collect("InvertedPendulum-v4")
    assert str(error.value) == (
        f"{policy_path}: policy observes 3 numbers, but --task InvertedPendulum-v4 observes (4,); it was trained "
        "on Pendulum-v1: give --task Pendulum-v1"
    )
    collected = collect_dataset(CollectConfig(output=tmp_path / "own.hdf5", size=50, policy=str(policy_path)))
    assert dataset_info(load_d4rl(collected))["task"] == "Pendulum-v1"  # no --task: the policy's own
    with pytest.raises(OfflineRLError, match=r"^--task: required \(--policy random\)"):
        collect_dataset(CollectConfig(output=tmp_path / "random.hdf5", size=50))
    unnamed.task = "Pendulum-v0-elsewhere"  # another env of the same sizes: it collects, and says so
    save_policy(unnamed, policy_path)
    with pytest.warns(TaskMismatchWarning, match="trained on Pendulum-v0-elsewhere but collects on --task Pendulum"):
        collect("Pendulum-v1")


def test_interrupted_write_leaves_nothing_at_the_final_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    original = h5py.Group.create_dataset
    calls = {"n": 0}

    def interrupt_midway(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(h5py.Group, "create_dataset", interrupt_midway)
    with pytest.raises(KeyboardInterrupt):
        collect_dataset(  # the file's own write alone: no parts kept on the way
            CollectConfig(
                task="Pendulum-v1", output=tmp_path / "out.hdf5", size=50, progress=False, collect_checkpoint_every=0
            )
        )
    assert list(tmp_path.iterdir()) == []


def test_existing_output_is_not_overwritten_without_flag(tmp_path: Path) -> None:
    from offline_rl.core.errors import OfflineRLError

    target = tmp_path / "keep.hdf5"
    target.write_bytes(b"precious")
    with pytest.raises(OfflineRLError, match="--overwrite"):
        collect_dataset(CollectConfig(task="Pendulum-v1", output=target, size=10, progress=False))
    assert target.read_bytes() == b"precious"


def test_default_dataset_is_generated_once_then_reused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = ensure_random_dataset("Pendulum-v1", 250)
    assert path == default_dataset_path("Pendulum-v1", 250)
    assert path.is_relative_to(tmp_path / "cache")
    first_message = capsys.readouterr().out.strip().splitlines()
    assert len(first_message) == 1 and "generating" in first_message[0]
    stamp = path.stat().st_mtime_ns
    assert ensure_random_dataset("Pendulum-v1", 250) == path
    assert "cached" in capsys.readouterr().out
    assert path.stat().st_mtime_ns == stamp
    assert len(load_d4rl(path)) == 250


def test_collect_cli_then_both_converters_print_statistics(tmp_path: Path) -> None:
    def run(*args: str) -> str:
        script, rest = (" ".join(args[:2]), args[2:]) if args[0] == "-m" else (args[0], args[1:])
        result = run_in_process(script, *rest, cwd=REPO_ROOT)
        assert result.returncode == 0, result.stderr
        return result.stdout

    d4rl_file, minari_dir = tmp_path / "hopper.hdf5", tmp_path / "hopper-minari"
    run(
        "-m",
        "offline_rl.collect",
        "--task",
        "Hopper-v4",
        "--output",
        str(d4rl_file),
        "--size",
        "500",
        "--num_envs",
        "2",
    )  # snake_case spelling accepted too
    run(
        "-m",
        "offline_rl.collect",
        "--task",
        "Hopper-v4",
        "--output",
        str(minari_dir),
        "--size",
        "500",
        "--num-envs",
        "2",
        "--format",
        "minari",
    )
    from_d4rl = run("converters/d4rl.py", str(d4rl_file), "--output", str(tmp_path / "a.hdf5"), "--task", "Hopper-v4")
    from_minari = run("converters/minari.py", str(minari_dir), "--output", str(tmp_path / "b.hdf5"))
    for output in (from_d4rl, from_minari):
        assert "transitions: 500" in output and "terminated" in output and "returns: mean" in output
    # The same seed gives the same episodes in both formats.
    a, b = load_d4rl(d4rl_file), load_minari(minari_dir)
    np.testing.assert_array_equal(a.obs, b.obs)
    np.testing.assert_array_equal(a.terminated, b.terminated)
    np.testing.assert_array_equal(a.truncated, b.truncated)
    assert dataset_info(b)["ref_max_score"] == 3234.3


def test_noise_with_the_random_policy_is_ignored_and_said_so(tmp_path: Path) -> None:
    from offline_rl.core.errors import IgnoredFlagWarning

    plain = collect_dataset(CollectConfig(task="Pendulum-v1", output=tmp_path / "a.hdf5", size=40, progress=False))
    with pytest.warns(IgnoredFlagWarning, match="--noise-std 0.3 is ignored with --policy random"):
        noisy = collect_dataset(
            CollectConfig(task="Pendulum-v1", output=tmp_path / "b.hdf5", size=40, noise_std=0.3, progress=False)
        )
    np.testing.assert_array_equal(load_d4rl(plain).act, load_d4rl(noisy).act)  # the same actions: no noise added


def test_a_discrete_task_collects_uniform_action_indices_that_both_loaders_read_back(tmp_path: Path) -> None:
    """D4RL's random recipe on CartPole: integer action indices, uniform over the two actions, with
    the episode ends of the continuous collections; the D4RL file and the Minari dataset load as
    discrete data (int64 of shape (N,)), which is what tells the two CQLs apart."""
    from offline_rl.data.transitions import has_discrete_actions

    path = collect_dataset(
        CollectConfig(task="CartPole-v1", output=tmp_path / "cp.hdf5", size=2000, num_envs=2, progress=False)
    )
    data = _read(path)
    assert data["actions"].dtype == np.int64 and data["actions"].shape == (2000,)
    counts = np.bincount(data["actions"], minlength=2)
    assert len(counts) == 2 and abs(counts[0] - 1000) < 100  # uniform: 100 is 4.5 standard deviations
    assert data["terminals"].sum() > 50  # random CartPole falls within tens of steps
    ends = data["terminals"] | data["timeouts"]
    inside = np.flatnonzero(~ends)
    np.testing.assert_array_equal(data["next_observations"][inside], data["observations"][inside + 1])
    buffer = load_d4rl(path)
    np.testing.assert_array_equal(buffer.act, data["actions"])
    assert has_discrete_actions(buffer) and dataset_info(buffer)["task"] == "CartPole-v1"

    minari_dir = collect_dataset(
        CollectConfig(
            task="CartPole-v1", output=tmp_path / "cp-minari", size=300, output_format="minari", progress=False
        )
    )
    from_minari = load_minari(minari_dir)
    assert from_minari.act.dtype == np.int64 and from_minari.act.shape == (300,)
    assert has_discrete_actions(from_minari) and not has_discrete_actions(
        load_d4rl(collect_dataset(CollectConfig(task="Pendulum-v1", output=tmp_path / "p.hdf5", size=50)))
    )


def test_what_a_discrete_collection_cannot_make_is_one_line_saying_where_to_go(tmp_path: Path) -> None:
    from offline_rl.core.errors import OfflineRLError

    policy = _constant_policy(tmp_path, obs_dim=4, act_value=0.5, low=-1.0, high=1.0)
    with pytest.raises(OfflineRLError, match=r"policy files act on continuous tasks, and --task CartPole-v1 has "):
        collect_dataset(CollectConfig(task="CartPole-v1", output=tmp_path / "a.hdf5", size=10, policy=str(policy)))
    with pytest.raises(OfflineRLError, match=r"an Atari game .* examples/atari_qrdqn.py --task ALE/Pong-v5 --watch"):
        collect_dataset(CollectConfig(task="ALE/Pong-v5", output=tmp_path / "b.hdf5", size=10))
    assert not list(tmp_path.glob("*.hdf5"))  # refused before anything was written


def test_integer_actions_in_a_d4rl_file_are_action_indices(tmp_path: Path) -> None:
    from offline_rl.core.errors import DatasetError

    def write(name: str, actions: np.ndarray) -> Path:
        path = tmp_path / name
        with h5py.File(path, "w") as file:
            file["observations"] = np.zeros((len(actions), 4), np.float32)
            file["actions"] = actions
            file["rewards"] = np.ones(len(actions), np.float32)
            file["terminals"] = np.r_[np.zeros(len(actions) - 1, bool), True]
            file["timeouts"] = np.zeros(len(actions), bool)
        return path

    column = load_d4rl(write("column.hdf5", np.array([[0], [2], [1]], np.int32))).act
    assert column.dtype == np.int64 and column.tolist() == [0, 2, 1]  # (N, 1) integers: one index per step
    assert load_d4rl(write("floats.hdf5", np.array([0.0, 2.0, 1.0]))).act.shape == (3, 1)  # floats stay continuous
    with pytest.raises(DatasetError, match=r"holds integers of shape \(3, 2\); expected one action index per step"):
        load_d4rl(write("pairs.hdf5", np.zeros((3, 2), np.int64)))
    with pytest.raises(DatasetError, match=r"key 'actions' holds the integer -1; expected action indices >= 0"):
        load_d4rl(write("negative.hdf5", np.array([0, -1, 1])))


def test_dict_observations_are_collected_flat_in_the_order_the_evaluation_env_flattens_them(tmp_path: Path) -> None:
    """AntMaze observes a dict (achieved goal, desired goal, observation). Before, collecting it
    stopped at a `ValueError: zip() argument 2 is shorter than argument 1` traceback."""
    import gymnasium as gym

    from offline_rl.cli.continuous_data import make_continuous_env
    from offline_rl.core.errors import OfflineRLError

    path = collect_dataset(
        CollectConfig(task="AntMaze_UMaze-v4", output=tmp_path / "maze.hdf5", size=40, seed=3, progress=False)
    )
    data = _read(path)
    evaluation_env = make_continuous_env("AntMaze_UMaze-v4")  # what d4rl_cql.py evaluates such data on
    first, _ = evaluation_env.reset(seed=3)  # the collection's first env is seeded with --seed
    assert data["observations"].shape == (40, *evaluation_env.observation_space.shape)
    np.testing.assert_allclose(data["observations"][0], first, rtol=1e-6)  # same flattening, same order
    assert not (data["terminals"] | data["timeouts"])[:-1].any()  # one episode: each step follows the last
    np.testing.assert_array_equal(data["observations"][1:], data["next_observations"][:-1])
    # A Minari dataset keeps the dicts, as Minari's own collector writes them, and loads to the same rows.
    from minari.dataset.minari_dataset import MinariDataset

    folder = collect_dataset(
        CollectConfig(
            task="AntMaze_UMaze-v4", output=tmp_path / "maze", size=40, seed=3, output_format="minari", progress=False
        )
    )
    recorded = MinariDataset(folder / "data")
    assert isinstance(recorded.observation_space, gym.spaces.Dict)
    assert recorded.observation_space == recorded.recover_environment().observation_space
    from_minari = load_minari(folder)
    np.testing.assert_array_equal(from_minari.obs, data["observations"])
    np.testing.assert_array_equal(from_minari.obs_next, data["next_observations"])
    # The converters check the data against the flattened env too (before: "observes ()", the dict's shape).
    converted = run_in_process(
        "converters/minari.py",
        *(str(folder), "--output", str(tmp_path / "maze-buffer.hdf5"), "--task", "AntMaze_UMaze-v4"),
        cwd=tmp_path,
    )
    assert converted.returncode == 0, converted.stderr[-2000:]
    with pytest.raises(OfflineRLError, match=r"^--task FrozenLake-v1: its observations are Discrete\(16\); a dataset"):
        collect_dataset(CollectConfig(task="FrozenLake-v1", output=tmp_path / "lake.hdf5", size=10))
