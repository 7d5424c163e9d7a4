"""D4RL loading: episode ends, next observations, dtypes, names, download."""

from __future__ import annotations

import functools
import http.server
import re
import threading
from pathlib import Path

import numpy as np
import pytest

import forked
from conftest import episodes_to_arrays, write_d4rl_file
from offline_rl.core.errors import DatasetError, DownloadError
from offline_rl.data import d4rl as d4rl_module
from offline_rl.data import dataset_info, load_d4rl
from offline_rl.envs import d4rl_catalogue


def test_timeouts_are_truncations_and_terminals_are_terminations(tmp_path: Path) -> None:
    arrays = episodes_to_arrays([3, 4, 2], ["terminal", "timeout", "terminal"])
    buffer = load_d4rl(write_d4rl_file(tmp_path / "d.hdf5", **arrays))
    assert len(buffer) == 9
    np.testing.assert_array_equal(buffer.terminated, [0, 0, 1, 0, 0, 0, 0, 0, 1])
    np.testing.assert_array_equal(buffer.truncated, [0, 0, 0, 0, 0, 0, 1, 0, 0])
    np.testing.assert_array_equal(buffer.done, buffer.terminated | buffer.truncated)
    np.testing.assert_array_equal(buffer.obs_next, arrays["next_observations"])


def test_with_next_observations_every_step_is_kept(tmp_path: Path) -> None:
    arrays = episodes_to_arrays([5, 5], ["timeout", "timeout"])
    buffer = load_d4rl(write_d4rl_file(tmp_path / "d.hdf5", **arrays))
    assert len(buffer) == 10
    assert dataset_info(buffer)["dropped_steps"] == 0
    np.testing.assert_array_equal(buffer.obs, arrays["observations"])
    np.testing.assert_array_equal(buffer.act, arrays["actions"])
    np.testing.assert_array_equal(buffer.rew, arrays["rewards"])


def test_without_next_observations_timeout_steps_are_dropped_not_bridged(tmp_path: Path) -> None:
    # episode A: steps 0-2 ending in a time-out; B: 3-5 ending terminal; C: 6-7, file ends.
    arrays = episodes_to_arrays([3, 3, 2], ["timeout", "terminal", "none"])
    del arrays["next_observations"]
    buffer = load_d4rl(write_d4rl_file(tmp_path / "d.hdf5", **arrays))
    obs = arrays["observations"]
    kept = [0, 1, 3, 4, 5, 6]
    np.testing.assert_array_equal(buffer.obs, obs[kept])
    np.testing.assert_array_equal(buffer.act, arrays["actions"][kept])
    # Inside episodes the successor is the next row; the new last steps are truncations.
    np.testing.assert_array_equal(buffer.obs_next[[0, 1, 2, 3, 5]], obs[[1, 2, 4, 5, 7]])
    np.testing.assert_array_equal(buffer.terminated, [0, 0, 0, 0, 1, 0])
    np.testing.assert_array_equal(buffer.truncated, [0, 1, 0, 0, 0, 1])
    # The terminal step's successor is unknown: it must not be the next episode's first obs.
    assert not np.array_equal(buffer.obs_next[4], obs[6])
    assert dataset_info(buffer)["dropped_steps"] == 2


@pytest.mark.parametrize("with_next", [True, False])
def test_no_episode_is_bridged_to_the_next(tmp_path: Path, with_next: bool) -> None:
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 12, size=40).tolist()
    ends = rng.choice(["terminal", "timeout"], size=40).tolist()
    arrays = episodes_to_arrays(lengths, ends)
    if not with_next:
        del arrays["next_observations"]
    buffer = load_d4rl(write_d4rl_file(tmp_path / "d.hdf5", **arrays))
    first_obs_of_episode = {float(arrays["observations"][start, 0]) for start in np.cumsum([0, *lengths[:-1]])}
    for index in np.flatnonzero(buffer.done):
        assert float(buffer.obs_next[index, 0]) not in first_obs_of_episode - {float(buffer.obs[index, 0])}
        if index + 1 < len(buffer):
            assert buffer.obs_next[index, 0] != buffer.obs[index + 1, 0]
    # Tianshou's episode navigation stops at every end and at the buffer's last transition.
    ends_idx = np.flatnonzero(buffer.done)
    np.testing.assert_array_equal(buffer.next(ends_idx), ends_idx)
    assert buffer.done[-1]


def test_float64_arrays_become_float32(tmp_path: Path) -> None:
    arrays = episodes_to_arrays([4, 4], ["terminal", "timeout"])
    as64 = {key: value.astype(np.float64) if value.dtype == np.float32 else value for key, value in arrays.items()}
    as64["observations"] = as64["observations"] + 1e-9  # not representable in float32
    buffer = load_d4rl(write_d4rl_file(tmp_path / "d.hdf5", **as64))
    for key in ("obs", "act", "rew", "obs_next"):
        assert getattr(buffer, key).dtype == np.float32, key
    np.testing.assert_allclose(buffer.obs, as64["observations"].astype(np.float32))


def test_flags_stored_as_floats_and_rewards_as_column(tmp_path: Path) -> None:
    arrays = episodes_to_arrays([2, 3], ["terminal", "timeout"])
    arrays["terminals"] = arrays["terminals"].astype(np.float32)
    arrays["timeouts"] = arrays["timeouts"].astype(np.uint8)
    arrays["rewards"] = arrays["rewards"][:, None]
    buffer = load_d4rl(write_d4rl_file(tmp_path / "d.hdf5", **arrays))
    np.testing.assert_array_equal(buffer.terminated, [0, 1, 0, 0, 0])
    np.testing.assert_array_equal(buffer.truncated, [0, 0, 0, 0, 1])
    assert buffer.rew.shape == (5,)


def test_dataset_name_is_found_under_d4rl_dataset_dir(tmp_path: Path) -> None:
    arrays = episodes_to_arrays([3], ["timeout"])
    write_d4rl_file(tmp_path / "d4rl" / "hopper_medium_replay-v2.hdf5", **arrays)
    buffer = load_d4rl("hopper-medium-replay-v2", download=False)
    info = dataset_info(buffer)
    assert info["name"] == "hopper-medium-replay-v2"
    assert (info["ref_min_score"], info["ref_max_score"]) == (-20.272305, 3234.3)


def test_file_named_like_d4rl_gets_its_name_and_scores(tmp_path: Path) -> None:
    arrays = episodes_to_arrays([3], ["timeout"])
    path = write_d4rl_file(tmp_path / "walker2d_medium_expert-v2.hdf5", **arrays)
    info = dataset_info(load_d4rl(path))
    assert info["name"] == "walker2d-medium-expert-v2"
    assert info["ref_max_score"] == 4592.3


# D4RL's own URLs (d4rl/infos.py, d4rl/locomotion/__init__.py), one per version: v0 is the CQL paper's.
D4RL_FILES = {
    "halfcheetah-medium-v2": "gym_mujoco_v2/halfcheetah_medium-v2.hdf5",
    "hopper-medium-replay-v2": "gym_mujoco_v2/hopper_medium_replay-v2.hdf5",
    "walker2d-full-replay-v1": "gym_mujoco_v1/walker2d_full_replay-v1.hdf5",
    "hopper-medium-expert-v0": "gym_mujoco/hopper_medium_expert.hdf5",
    "halfcheetah-medium-replay-v0": "gym_mujoco/halfcheetah_mixed.hdf5",
    "walker2d-medium-replay-v0": "gym_mujoco/walker_mixed.hdf5",
    "ant-random-expert-v0": "gym_mujoco/ant_random_expert.hdf5",
    "antmaze-large-play-v2": (
        "ant_maze_v2/Ant_maze_hardest-maze_noisy_multistart_True_multigoal_False_sparse_fixed.hdf5"
    ),
    "antmaze-medium-diverse-v1": "ant_maze_v1/Ant_maze_medium_noisy_multistart_True_multigoal_True_sparse.hdf5",
    "antmaze-large-play-v1": "ant_maze_v1/Ant_maze_large_noisy_multistart_True_multigoal_False_sparse.hdf5",
    "antmaze-umaze-v0": "ant_maze_new/Ant_maze_u-maze_noisy_multistart_False_multigoal_False_sparse.hdf5",
    "antmaze-large-diverse-v0": "ant_maze_new/Ant_maze_hardest-maze_noisy_multistart_True_multigoal_True_sparse.hdf5",
    # Adroit (d4rl/infos.py): v0 named after the DAPG demonstrations, v1 after the dataset
    "pen-human-v0": "hand_dapg/pen-v0_demos_clipped.hdf5",
    "door-cloned-v0": "hand_dapg/door-demos-v0-bc-combined.hdf5",
    "relocate-expert-v0": "hand_dapg/relocate-v0_expert_clipped.hdf5",
    "hammer-human-v1": "hand_dapg_v1/hammer-human-v1.hdf5",
    "pen-cloned-v1": "hand_dapg_v1/pen-cloned-v1.hdf5",
    # Maze2D v1: a sparse and a dense file per maze
    "maze2d-umaze-v1": "maze2d/maze2d-umaze-sparse-v1.hdf5",
    "maze2d-large-dense-v1": "maze2d/maze2d-large-dense-v1.hdf5",
    # Kitchen v0 (d4rl/kitchen/__init__.py): complete is the "mini" file
    "kitchen-complete-v0": "kitchen/mini_kitchen_microwave_kettle_light_slider-v0.hdf5",
    "kitchen-partial-v0": "kitchen/kitchen_microwave_kettle_light_slider-v0.hdf5",
    "kitchen-mixed-v0": "kitchen/kitchen_microwave_kettle_bottomburner_light-v0.hdf5",
}


@pytest.mark.parametrize(("name", "file"), D4RL_FILES.items())
def test_urls_follow_d4rl_file_names(name: str, file: str) -> None:
    assert d4rl_catalogue.d4rl_url(name) == f"{d4rl_catalogue.D4RL_URL_ROOT}/{file}"
    assert d4rl_module.d4rl_path(name).name == file.rsplit("/", 1)[1]  # D4RL's own file name, found by it


def test_every_known_name_has_a_url_and_a_near_miss_is_told_it() -> None:
    names = d4rl_catalogue.d4rl_names()
    # locomotion: 5 kinds in v0 (+ ant-random-expert), 6 in v1 and v2; AntMaze: 6 in each version; Adroit:
    # 4 tasks × 3 kinds in v0 and v1; Maze2D: 3 mazes × 2 rewards in v1; Kitchen: 3 in v0
    assert len(names) == 4 * 5 + 1 + 4 * 6 * 2 + 6 * 3 + 4 * 3 * 2 + 3 * 2 + 3 and len(set(names)) == len(names)
    urls = [d4rl_catalogue.d4rl_url(name) for name in names]
    assert len(set(urls)) == len(urls)  # no two names share a file
    for name in names:
        assert d4rl_catalogue.is_d4rl_name(name) and d4rl_catalogue.closest_d4rl_name(name) == name
        assert d4rl_catalogue.d4rl_url(name).startswith(d4rl_catalogue.D4RL_URL_ROOT)
    with pytest.raises(DatasetError, match=re.escape("'hopper-full-replay-v0' (did you mean hopper-full-replay-v2?)")):
        load_d4rl("hopper-full-replay-v0")


@pytest.mark.parametrize("version", ["v0", "v1", "v2"])
def test_each_version_loads_its_own_file_with_d4rls_time_limit(tmp_path: Path, version: str) -> None:
    # a file without `timeouts` nor `next_observations` (older D4RL files): time-outs from the limit, 1000 steps
    arrays = episodes_to_arrays([1000, 400, 1000, 5], ["timeout", "terminal", "timeout", "none"])
    del arrays["timeouts"], arrays["next_observations"]
    name = f"hopper-medium-expert-{version}"
    write_d4rl_file(d4rl_module.d4rl_path(name), **arrays)
    buffer = load_d4rl(name, download=False)
    info = dataset_info(buffer)
    assert (info["name"], info["gymnasium_task"], info["timeouts_from"]) == (name, "Hopper-v4", "time limit 1000")
    assert (info["ref_min_score"], info["ref_max_score"]) == (-20.272305, 3234.3)
    # each time-out step has no known successor: dropped, and the step before it ends the episode
    assert np.flatnonzero(buffer.truncated).tolist() == [998, 998 + 400 + 999, len(buffer) - 1]
    assert np.flatnonzero(buffer.terminated).tolist() == [998 + 400]
    others = [other for other in ("v0", "v1", "v2") if other != version]
    for other in others:  # another version's name never reads this file
        with pytest.raises(DownloadError, match=re.escape(d4rl_module.d4rl_path(f"hopper-medium-expert-{other}").name)):
            load_d4rl(f"hopper-medium-expert-{other}", download=False)


@pytest.mark.parametrize(
    ("name", "limit"), [("antmaze-umaze-v0", 700), ("antmaze-umaze-diverse-v1", 700), ("antmaze-large-play-v0", 1000)]
)
def test_antmaze_files_of_every_version_get_d4rls_limit(tmp_path: Path, name: str, limit: int) -> None:
    arrays = episodes_to_arrays([limit, limit], ["timeout", "timeout"])
    del arrays["timeouts"]
    path = write_d4rl_file(d4rl_module.d4rl_path(name), **arrays)
    info = dataset_info(buffer := load_d4rl(path))  # found by its D4RL file name
    assert info["name"] == name and info["timeouts_from"] == f"time limit {limit}"
    assert np.flatnonzero(buffer.truncated).tolist() == [limit - 1, 2 * limit - 1]
    assert (info["ref_min_score"], info["ref_max_score"]) == (0.0, 1.0)
    maze = name.split("-")[1]  # v0 and v1 files: D4RL's v0 env, whose goal is drawn once per env
    assert info["gymnasium_task"] == f"D4RL/antmaze-{maze}-{'v2' if name.endswith('v2') else 'v0'}"


@pytest.mark.parametrize(("name", "limit"), [("pen-human-v0", 100), ("pen-expert-v1", 100), ("door-cloned-v1", 200)])
def test_adroit_files_get_d4rls_limit_their_env_and_reference_scores(tmp_path: Path, name: str, limit: int) -> None:
    # v0's human demonstrations have no `timeouts`: episodes end at D4RL's time limit for the task
    arrays = episodes_to_arrays([limit, limit, 7], ["timeout", "timeout", "terminal"], obs_dim=45, act_dim=24)
    del arrays["timeouts"], arrays["next_observations"]
    write_d4rl_file(d4rl_module.d4rl_path(name), **arrays)
    buffer = load_d4rl(name, download=False)
    info, task = dataset_info(buffer), name.split("-")[0]
    assert (info["name"], info["gymnasium_task"], info["timeouts_from"]) == (
        name,
        f"D4RL/{task}-v1",
        f"time limit {limit}",
    )
    d4rl_references = {"pen": (96.262799, 3076.8331017826877), "door": (-56.512833, 2880.5693087298737)}
    assert (info["ref_min_score"], info["ref_max_score"]) == d4rl_references[task]
    assert np.flatnonzero(buffer.truncated).tolist() == [limit - 2, 2 * limit - 3]  # each time-out step dropped
    assert np.flatnonzero(buffer.terminated).tolist() == [len(buffer) - 1]


@pytest.mark.parametrize(
    ("name", "limit", "references"),
    [
        ("maze2d-umaze-v1", 300, (23.85, 161.86)),
        ("maze2d-medium-dense-v1", 600, (44.264742, 297.4552547777125)),
        ("maze2d-large-v1", 800, (6.7, 273.99)),
    ],
)
def test_maze2d_files_get_d4rls_limit_and_their_own_reference_scores(
    tmp_path: Path, name: str, limit: int, references: tuple[float, float]
) -> None:
    """Maze2D's references differ by maze and reward (D4RL's infos.py), unlike locomotion's per-env pairs;
    each file evaluates on D4RL's env of its own maze and reward, rebuilt here."""
    arrays = episodes_to_arrays([limit, 5], ["timeout", "none"], obs_dim=4, act_dim=2)
    del arrays["timeouts"], arrays["next_observations"]
    path = write_d4rl_file(d4rl_module.d4rl_path(name), **arrays)
    info = dataset_info(buffer := load_d4rl(path))  # found by its D4RL file name
    assert (info["name"], info["timeouts_from"]) == (name, f"time limit {limit}")
    assert (info["ref_min_score"], info["ref_max_score"]) == references
    assert info["gymnasium_task"] == f"D4RL/{name}"
    assert np.flatnonzero(buffer.truncated).tolist() == [limit - 2, len(buffer) - 1]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("name", ["hopper-medium-replay-v2", "walker2d-medium-replay-v0", "antmaze-large-play-v1"])
def test_missing_named_dataset_is_downloaded_atomically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    served = tmp_path / "served"
    arrays = episodes_to_arrays([4, 4], ["terminal", "timeout"])
    write_d4rl_file(served / D4RL_FILES[name], **arrays)
    handler = functools.partial(_QuietHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setattr(d4rl_catalogue, "D4RL_URL_ROOT", f"http://127.0.0.1:{server.server_address[1]}")
        buffer = load_d4rl(name)
    finally:
        server.shutdown()
        server.server_close()
    assert len(buffer) == 8 and dataset_info(buffer)["name"] == name
    target_dir = tmp_path / "d4rl"
    assert sorted(p.name for p in target_dir.iterdir()) == [d4rl_module.d4rl_path(name).name]


def test_download_failure_names_path_and_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(d4rl_catalogue, "D4RL_URL_ROOT", "http://127.0.0.1:9")  # discard port: refused
    with pytest.raises(DownloadError) as caught:
        load_d4rl("walker2d-medium-v2")
    message = str(caught.value)
    assert str(tmp_path / "d4rl" / "walker2d_medium-v2.hdf5") in message
    assert "http://127.0.0.1:9/gym_mujoco_v2/walker2d_medium-v2.hdf5" in message
    assert "\n" not in message
    assert not (tmp_path / "d4rl").exists() or not any((tmp_path / "d4rl").iterdir())


# --- files without `timeouts`: D4RL's time-limit rule, or a warning -----------------------------------


def test_the_time_limit_rule_is_d4rls() -> None:
    # limit 3; a terminal at step 4 starts a new count: time-outs at steps 2, 7 (4+3) and 10
    terminals = np.zeros(12, dtype=bool)
    terminals[4] = True
    timeouts = d4rl_module.timeouts_from_episode_limit(terminals, 3)
    assert np.flatnonzero(timeouts).tolist() == [2, 7, 10]


def test_a_file_without_timeouts_gets_the_tasks_time_limit(tmp_path: Path) -> None:
    arrays = episodes_to_arrays([4, 4, 3], ["timeout", "timeout", "terminal"])
    del arrays["timeouts"]
    path = write_d4rl_file(tmp_path / "old.hdf5", **arrays)
    buffer = load_d4rl(path, max_episode_steps=4)
    np.testing.assert_array_equal(buffer.truncated, [0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0])
    np.testing.assert_array_equal(buffer.terminated, [0] * 10 + [1])
    assert dataset_info(buffer)["timeouts_from"] == "time limit 4"


def test_a_named_d4rl_file_without_timeouts_uses_d4rls_own_limit(tmp_path: Path) -> None:
    arrays = episodes_to_arrays([1000, 700], ["timeout", "terminal"])
    del arrays["timeouts"]
    path = write_d4rl_file(tmp_path / "hopper_medium-v2.hdf5", **arrays)  # D4RL's file name: hopper, 1000 steps
    buffer = load_d4rl(path, max_episode_steps=5)  # the dataset's own limit wins over the caller's
    assert np.flatnonzero(buffer.truncated).tolist() == [999]
    assert d4rl_catalogue.d4rl_episode_steps("antmaze-umaze-v2") == 700


def test_a_file_without_timeouts_and_no_known_length_warns_once_naming_it(tmp_path: Path) -> None:
    arrays = episodes_to_arrays([4, 3], ["timeout", "terminal"])
    del arrays["timeouts"]
    path = write_d4rl_file(tmp_path / "mine.hdf5", **arrays)
    with pytest.warns(d4rl_module.MissingTimeoutsWarning) as caught:
        buffer = load_d4rl(path)
    (warning,) = caught
    message = str(warning.message)
    assert str(path) in message and "'terminals' only" in message and "\n" not in message
    assert not buffer.truncated[:-1].any() and dataset_info(buffer)["timeouts_from"] == "none"


def test_the_example_applies_the_tasks_limit_without_a_warning(tmp_path: Path) -> None:
    import warnings

    from conftest import run_in_process
    from offline_rl.data import MissingTimeoutsWarning

    arrays = episodes_to_arrays([4, 3], ["timeout", "terminal"], obs_dim=3, act_dim=1)
    del arrays["timeouts"]
    path = write_d4rl_file(tmp_path / "mine.hdf5", **arrays)
    args = ("--dataset", str(path), "--epoch", "1", "--step-per-epoch", "1", "--test-num", "1", "--batch-size", "4")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pendulum = run_in_process("examples/d4rl_cql.py", "--task", "Pendulum-v1", *args, cwd=tmp_path)
    assert pendulum.returncode == 0, pendulum.stderr[-2000:]
    assert not [w for w in caught if issubclass(w.category, MissingTimeoutsWarning)]  # Pendulum's limit is known


def test_command_lines_print_our_warnings_as_one_line() -> None:
    import sys

    from conftest import script_env

    program = (
        "import warnings\n"
        "from offline_rl.cli.main import run_main\n"
        "from offline_rl.data import MissingTimeoutsWarning\n"
        "def main(argv):\n"
        "    warnings.warn(\"data.hdf5: no 'timeouts' key\", MissingTimeoutsWarning, stacklevel=1)\n"
        "    warnings.warn('not ours', UserWarning, stacklevel=1)\n"
        "run_main(main, [])\n"
    )
    done = forked.run([sys.executable, "-c", program], capture_output=True, text=True, env=script_env())
    assert done.returncode == 0
    lines = done.stderr.splitlines()
    assert lines[0] == "warning: data.hdf5: no 'timeouts' key"
    assert "UserWarning: not ours" in done.stderr  # other warnings keep Python's format


def ant_v2_file(tmp_path: Path, name: str, *, contact_forces: float = 0.0) -> tuple[Path, dict[str, np.ndarray]]:
    """A D4RL Ant file as D4RL's are: gymnasium Ant-v4 rollouts (its 27 observations) with 84 contact
    columns appended, zero as in D4RL's files unless `contact_forces` says otherwise."""
    import h5py

    from offline_rl.runs.dataset_generation import CollectConfig, collect_dataset

    recorded = collect_dataset(CollectConfig(task="Ant-v4", output=tmp_path / "ant27.hdf5", size=300, progress=False))
    with h5py.File(recorded, "r") as file:
        columns = {key: file[key][()] for key in ("observations", "actions", "rewards", "terminals", "timeouts")}
        columns["next_observations"] = file["next_observations"][()]
    state = {key: columns[key] for key in ("observations", "next_observations")}
    padded = {key: np.pad(value, ((0, 0), (0, 84)), constant_values=contact_forces) for key, value in state.items()}
    return write_d4rl_file(tmp_path / "d4rl" / name, **{**columns, **padded}), state


def test_d4rl_ant_files_observe_what_ant_v4_observes(tmp_path: Path) -> None:
    _, state = ant_v2_file(tmp_path, "ant_random-v2.hdf5")
    buffer = load_d4rl("ant-random-v2", download=False)
    np.testing.assert_array_equal(buffer.obs[: len(buffer)], state["observations"])
    np.testing.assert_array_equal(buffer.obs_next[: len(buffer)], state["next_observations"])
    assert "84 contact forces" in dataset_info(buffer)["observations"]


@pytest.mark.parametrize("case", ["forces recorded", "not a D4RL Ant name"])
def test_contact_forces_are_kept_where_recorded_or_the_file_is_not_d4rls_ant(tmp_path: Path, case: str) -> None:
    name, forces = ("ant_medium-v2.hdf5", 0.5) if case == "forces recorded" else ("my_ant.hdf5", 0.0)
    path, _ = ant_v2_file(tmp_path, name, contact_forces=forces)
    buffer = load_d4rl(path)
    assert buffer.obs.shape[1:] == (111,) and "observations" not in dataset_info(buffer)


def test_the_example_trains_on_a_d4rl_ant_dataset_and_evaluates_it_on_ant_v4(tmp_path: Path) -> None:
    from conftest import run_in_process

    ant_v2_file(tmp_path, "ant_medium-v2.hdf5")
    args = ["--task", "Ant-v4", "--dataset", "ant-medium-v2", "--epoch", "1", "--step-per-epoch", "2"]
    small = ["--test-num", "1", "--batch-size", "16", "--hidden-sizes", "16", "--critic-layers", "1"]
    result = run_in_process("examples/d4rl_cql.py", *args, *small, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "observations: the first 27 of 111 (Ant-v4's)" in result.stdout
    assert re.search(r"last evaluation return -?[\d.]+ ± [\d.]+, normalized score -?[\d.]+", result.stdout)


def test_named_d4rl_datasets_say_which_gymnasium_env_evaluates_them(tmp_path: Path) -> None:
    from offline_rl.envs.d4rl_catalogue import d4rl_gymnasium_task

    assert [d4rl_gymnasium_task(f"{env}-medium-v2") for env in ("halfcheetah", "hopper", "walker2d", "ant")] == [
        "HalfCheetah-v4",
        "Hopper-v4",
        "Walker2d-v4",
        "Ant-v4",
    ]
    assert d4rl_gymnasium_task("antmaze-umaze-v2") == "D4RL/antmaze-umaze-v2" and d4rl_gymnasium_task("my_file") is None
    ant_v2_file(tmp_path, "ant_random-v2.hdf5")
    assert dataset_info(load_d4rl("ant-random-v2", download=False))["gymnasium_task"] == "Ant-v4"
    renamed = tmp_path / "mine.hdf5"
    (tmp_path / "d4rl" / "ant_random-v2.hdf5").rename(renamed)
    assert "gymnasium_task" not in dataset_info(load_d4rl(renamed))  # not a D4RL name: nothing is guessed
