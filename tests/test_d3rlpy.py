"""d3rlpy's dataset files: read as d3rlpy itself reads them, episodes never bridged, trained on by both CQLs.

`tests/data/d3rlpy-*.h5` were written by d3rlpy 2.8.1 itself (`tests/data/make_d3rlpy_files.py`: an
algorithm's `collect` into a replay buffer, and an `MDPDataset` of tuple observations), and each `.npz`
beside them holds the transitions d3rlpy's own transition picker reads from that file. The edge cases
are written here with h5py in the same layout, which the first test checks against d3rlpy's own file.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from offline_rl.core.errors import DatasetError, OfflineRLError
from offline_rl.data import dataset_info, detect_format, load_dataset

DATA = Path(__file__).resolve().parent / "data"
D3RLPY_FILES = ("d3rlpy-pendulum", "d3rlpy-cartpole", "d3rlpy-tuple", "d3rlpy-v1")


def write_d3rlpy_episodes(path: Path, episodes: list[dict[str, np.ndarray | bool]]) -> Path:
    """A file in d3rlpy 2.x's `dump` layout (format 2.1): each episode's arrays under `<column>_<i>`
    (tuple observations as `observations_<i>_<j>`), rewards as (T, 1), one `terminated_<i>` flag."""
    with h5py.File(path, "w") as file:
        file.create_dataset("columns", data=["observations", "actions", "rewards", "terminated"])
        file.create_dataset("num_episodes", data=len(episodes))
        for index, episode in enumerate(episodes):
            observations = episode["observations"]
            if isinstance(observations, tuple):
                for part, array in enumerate(observations):
                    file.create_dataset(f"observations_{index}_{part}", data=array)
            else:
                file.create_dataset(f"observations_{index}", data=observations)
            file.create_dataset(f"actions_{index}", data=episode["actions"])
            file.create_dataset(f"rewards_{index}", data=np.asarray(episode["rewards"]).reshape(-1, 1))
            file.create_dataset(f"terminated_{index}", data=bool(episode["terminated"]))
        file.create_dataset("version", data="2.1")
    return path


def episode(steps: int, terminated: bool, start: float, discrete: bool = False) -> dict[str, np.ndarray | bool]:
    """Observations numbered `start`, `start + 1`, ... so a bridged `obs_next` shows in the numbers."""
    observations = (start + np.arange(steps, dtype=np.float32))[:, None].repeat(3, axis=1)
    actions = np.arange(steps, dtype=np.int64)[:, None] % 2 if discrete else np.full((steps, 2), 0.5, np.float32)
    return {
        "observations": observations,
        "actions": actions,
        "rewards": start + np.arange(steps),
        "terminated": terminated,
    }


def layout(path: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """Key → (shape past the first axis, dtype kind) of a d3rlpy file, episode numbers blanked."""
    found: dict[str, tuple[tuple[int, ...], str]] = {}
    with h5py.File(path, "r") as file:
        for key, item in file.items():
            name = "_".join("i" if part.isdigit() else part for part in key.split("_"))
            found[name] = (item.shape[1:], item.dtype.kind)
    return found


def test_the_h5py_writer_here_writes_d3rlpys_own_layout(tmp_path: Path) -> None:
    ours = write_d3rlpy_episodes(
        tmp_path / "d.h5", [episode(4, True, 0.0, discrete=True), episode(3, False, 9.0, True)]
    )
    ours_layout, theirs = layout(ours), layout(DATA / "d3rlpy-cartpole.h5")
    assert ours_layout.keys() == theirs.keys()
    for key in ("actions_i", "rewards_i", "terminated_i", "num_episodes"):
        assert ours_layout[key][1] == theirs[key][1], key
    assert ours_layout["rewards_i"][0] == theirs["rewards_i"][0] == (1,)


@pytest.mark.parametrize("name", D3RLPY_FILES)
def test_every_transition_is_the_one_d3rlpy_itself_reads(name: str) -> None:
    buffer = load_dataset(DATA / f"{name}.h5")
    expected = np.load(DATA / f"{name}.npz")
    terminal = expected["terminal"].astype(bool)
    assert len(buffer) == len(terminal)
    np.testing.assert_array_equal(buffer.obs, expected["obs"])
    np.testing.assert_array_equal(buffer.act, expected["act"].reshape(buffer.act.shape))
    np.testing.assert_array_equal(buffer.rew, expected["rew"])
    np.testing.assert_array_equal(buffer.terminated, terminal)
    # d3rlpy puts zeros after a terminal step; the placeholder here is never read (no bootstrap).
    np.testing.assert_array_equal(buffer.obs_next[~terminal], expected["obs_next"][~terminal])
    assert buffer.done[-1]
    assert dataset_info(buffer)["format"] == "d3rlpy"
    assert detect_format(DATA / f"{name}.h5") == "d3rlpy"


def test_discrete_and_continuous_actions_and_tuple_observations_take_their_shapes() -> None:
    cartpole, pendulum, tuples = (
        load_dataset(DATA / f"d3rlpy-{name}.h5") for name in ("cartpole", "pendulum", "tuple")
    )
    assert cartpole.act.dtype == np.int64 and cartpole.act.shape == (len(cartpole),)
    assert pendulum.act.dtype == np.float32 and pendulum.act.shape == (len(pendulum), 1)
    assert tuples.obs.shape == (len(tuples), 3 + 2)  # the tuple's two vectors side by side, in order
    assert dataset_info(pendulum)["action_units"] == "env"  # d3rlpy stores what the env received


def test_a_file_named_after_a_d4rl_dataset_takes_its_env_and_reference_scores(tmp_path: Path) -> None:
    """d3rlpy's `get_d4rl` users save D4RL's data under its name; the name is all a d3rlpy file says."""
    path = write_d3rlpy_episodes(tmp_path / "hopper-medium-v2.h5", [episode(3, True, 0.0)])
    info = dataset_info(load_dataset(path))
    assert info["gymnasium_task"] == "Hopper-v4"
    assert (info["ref_min_score"], info["ref_max_score"]) == pytest.approx((-20.272305, 3234.3))
    assert "gymnasium_task" not in dataset_info(load_dataset(DATA / "d3rlpy-pendulum.h5"))


def test_an_unfinished_episode_ends_truncated_at_its_last_known_successor_and_nothing_is_bridged(
    tmp_path: Path,
) -> None:
    """Hand-computed: a terminated episode of 3 steps gives 3 transitions; an unfinished one of 3 steps
    gives 2 (its last step has no recorded successor), the second truncated with obs_next = its step 3."""
    path = write_d3rlpy_episodes(
        tmp_path / "d.h5", [episode(3, True, 0.0), episode(3, False, 10.0), episode(2, True, 20.0)]
    )
    buffer = load_dataset(path)
    np.testing.assert_array_equal(buffer.obs[:, 0], [0, 1, 2, 10, 11, 20, 21])
    np.testing.assert_array_equal(buffer.obs_next[:, 0], [1, 2, 2, 11, 12, 21, 21])  # 2 and 21: placeholders
    np.testing.assert_array_equal(buffer.rew, [0, 1, 2, 10, 11, 20, 21])
    np.testing.assert_array_equal(buffer.terminated, [0, 0, 1, 0, 0, 0, 1])
    np.testing.assert_array_equal(buffer.truncated, [0, 0, 0, 0, 1, 0, 0])
    assert dataset_info(buffer)["dropped_steps"] == 1


def test_a_d3rlpy_1_file_ends_episodes_at_episode_terminals_and_keeps_running_tails(tmp_path: Path) -> None:
    """d3rlpy 1.x's flat layout: an `episode_terminals` end that is not a terminal is a time-out (its step
    dropped, no successor recorded); steps after the last end run to the data's end, truncated there."""
    path = tmp_path / "v1.h5"
    with h5py.File(path, "w") as file:
        file.create_dataset("observations", data=np.arange(8, dtype=np.float32)[:, None])
        file.create_dataset("actions", data=np.array([0, 1, 0, 1, 0, 1, 0, 1], dtype=np.float32)[:, None])
        file.create_dataset("rewards", data=np.ones(8, dtype=np.float32))
        file.create_dataset("terminals", data=np.array([0, 1, 0, 0, 0, 0, 0, 0], dtype=np.float32))
        file.create_dataset("episode_terminals", data=np.array([0, 1, 0, 1, 0, 0, 0, 0], dtype=np.float32))
        file.create_dataset("discrete_action", data=True)
        file.create_dataset("version", data="1.0")
    buffer = load_dataset(path)
    np.testing.assert_array_equal(buffer.obs[:, 0], [0, 1, 2, 4, 5, 6])
    np.testing.assert_array_equal(buffer.obs_next[:, 0], [1, 1, 3, 5, 6, 7])
    np.testing.assert_array_equal(buffer.terminated, [0, 1, 0, 0, 0, 0])
    np.testing.assert_array_equal(buffer.truncated, [0, 0, 1, 0, 0, 1])
    assert buffer.act.dtype == np.int64  # whole-number floats of a discrete_action file are indices


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda f: f.__delitem__("observations_1"),
            r"d\.h5: missing key 'observations_1'; d3rlpy writes one per episode",
        ),
        (lambda f: f.__delitem__("num_episodes"), r"d\.h5: a d3rlpy file of format 2\.1 with no 'num_episodes' key"),
        (lambda f: _replace(f, "rewards_1", np.ones((5, 1))), r"key 'rewards_1' has shape \(5, 1\); expected 3 rows"),
        (lambda f: _replace(f, "observations_0", np.full((3, 3), np.nan)), r"key 'observations' has 9 NaN/inf"),
        (lambda f: _replace(f, "observations_0", np.zeros((3, 1, 84, 84), np.uint8)), r"holds images of shape"),
        (
            lambda f: _replace(f, "actions_1", np.zeros((3, 2), np.float32)),
            r"key 'actions_1' has dtype float32; expected integers",
        ),
        (lambda f: f.__delitem__("actions_1"), r"d\.h5: missing key 'actions_1'; d3rlpy writes one per episode"),
        (lambda f: _replace_with_group(f, "actions_1"), r"d\.h5: key 'actions_1' is a group; expected an array"),
        (
            lambda f: _replace_with_group(f, "columns"),
            r"key 'columns' is missing or a group; expected d3rlpy's columns",
        ),
        (
            lambda f: _replace(f, "observations_1", np.array([b"a", b"b", b"c"])),
            r"key 'observations_1' has dtype \|S1; expected numbers",
        ),
        (
            lambda f: _replace(f, "observations_1", np.zeros((3, 5), np.float32)),
            r"episode 1's observations have 5 numbers a step; expected 3, as in episode 0",
        ),
        (
            lambda f: _replace(f, "terminated_1", np.array([True, False])),
            r"key 'terminated_1' has shape \(2,\); expected one flag, \(\)",
        ),
        (
            lambda f: _replace(f, "columns", np.array([b"observations", b"actions", b"rewards"])),
            r"with columns \['observations', 'actions', 'rewards'\]; expected format 2\.1",
        ),
    ],
)
def test_bad_d3rlpy_files_are_one_line_naming_the_key(tmp_path: Path, change, message: str) -> None:
    path = write_d3rlpy_episodes(tmp_path / "d.h5", [episode(3, True, 0.0, True), episode(3, False, 5.0, True)])
    with h5py.File(path, "a") as file:
        change(file)
    with pytest.raises(DatasetError, match=message):
        load_dataset(path)


def _replace(file: h5py.File, key: str, data: np.ndarray) -> None:
    del file[key]
    file.create_dataset(key, data=data)


def _replace_with_group(file: h5py.File, key: str) -> None:
    del file[key]
    file.create_group(key)


def test_episodes_without_a_known_successor_are_dropped_and_a_file_of_only_those_is_refused(tmp_path: Path) -> None:
    """An unfinished episode of one step has no transition: skipped, counted as dropped. A file of only
    such episodes has nothing to learn from."""
    path = write_d3rlpy_episodes(tmp_path / "d.h5", [episode(1, False, 0.0), episode(2, True, 10.0)])
    buffer = load_dataset(path)
    np.testing.assert_array_equal(buffer.obs[:, 0], [10, 11])
    assert dataset_info(buffer)["dropped_steps"] == 1
    path = write_d3rlpy_episodes(tmp_path / "none.h5", [episode(1, False, 0.0), episode(1, False, 5.0)])
    with pytest.raises(DatasetError, match=r"none\.h5: no transition has a known next observation"):
        load_dataset(path)


def test_a_d3rlpy_1_file_of_discrete_actions_with_fractions_or_a_file_of_neither_layout_is_one_line(
    tmp_path: Path,
) -> None:
    from offline_rl.data.d3rlpy import load_d3rlpy

    path = tmp_path / "v1.h5"
    with h5py.File(path, "w") as file:
        file.create_dataset("observations", data=np.arange(4, dtype=np.float32)[:, None])
        file.create_dataset("actions", data=np.array([0, 1.5, 0, 1], dtype=np.float32)[:, None])
        file.create_dataset("rewards", data=np.ones(4, dtype=np.float32))
        file.create_dataset("terminals", data=np.array([0, 1, 0, 1], dtype=np.float32))
        file.create_dataset("episode_terminals", data=np.array([0, 1, 0, 1], dtype=np.float32))
        file.create_dataset("discrete_action", data=True)
    with pytest.raises(
        DatasetError, match=r"key 'actions' of a discrete-action file \(discrete_action\) holds fractions"
    ):
        load_dataset(path)
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as file:
        file.create_dataset("observations", data=np.zeros((2, 1)))
    with pytest.raises(
        DatasetError, match=r"other\.h5: not a d3rlpy dataset file \(no 'columns' or 'episode_terminals'"
    ):
        load_d3rlpy(other)


def test_the_d4rl_converter_says_what_a_d3rlpy_file_is() -> None:
    from offline_rl.data import load_d4rl

    with pytest.raises(
        DatasetError, match=r"missing key 'observations'; .*; it is a d3rlpy dataset file \(load_d3rlpy"
    ):
        load_d4rl(DATA / "d3rlpy-cartpole.h5")


def test_both_cqls_train_on_d3rlpy_files_and_name_the_missing_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A d3rlpy user's files train as they are. d3rlpy records no env: without --task the error names
    that flag, not a command that would make data for the default task under the user's file name."""
    from offline_rl.examples import atari_cql as atari_cql_program
    from offline_rl.examples import d4rl_cql as d4rl_cql_program

    monkeypatch.chdir(tmp_path)
    cartpole, pendulum = str(DATA / "d3rlpy-cartpole.h5"), str(DATA / "d3rlpy-pendulum.h5")
    budget = ["--epoch", "1", "--test-num", "1", "--logdir", str(tmp_path / "log")]
    result = atari_cql_program.main(
        ["--task", "CartPole-v1", "--load-buffer-name", cartpole, "--update-per-epoch", "20", *budget]
    )
    assert result["updates"] == 20 and result["task"] == "CartPole-v1"
    result = d4rl_cql_program.main(["--task", "Pendulum-v1", "--dataset", pendulum, "--step-per-epoch", "5", *budget])
    assert result["task"] == "Pendulum-v1"
    no_task = r"records no env, so the default \S+ was tried: give --task with the env it was recorded on$"
    with pytest.raises(OfflineRLError, match=no_task):
        atari_cql_program.main(["--load-buffer-name", cartpole, *budget])
    with pytest.raises(OfflineRLError, match=no_task):
        d4rl_cql_program.main(["--dataset", pendulum, *budget])
    with pytest.raises(OfflineRLError, match=r"d3rlpy-cartpole.h5: a d3rlpy dataset file is trained on alone"):
        atari_cql_program.main(["--task", "CartPole-v1", "--load-buffer-name", cartpole, cartpole, *budget])
