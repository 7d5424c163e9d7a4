"""Every kind of bad input gives one clear line naming the file and key, and exit status 2."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import REPO_ROOT, episodes_to_arrays, run_in_process, run_repo_script, write_d4rl_file
from offline_rl.core.errors import DatasetError, OfflineRLError
from offline_rl.data import load_buffer, load_d4rl, load_dataset


def _good() -> dict[str, np.ndarray]:
    return episodes_to_arrays([4, 4], ["terminal", "timeout"])


def _without(key: str) -> Callable[[dict], dict]:
    def edit(arrays: dict) -> dict:
        del arrays[key]
        return arrays

    return edit


def _set(key: str, value: Callable[[np.ndarray], np.ndarray]) -> Callable[[dict], dict]:
    def edit(arrays: dict) -> dict:
        arrays[key] = value(arrays[key])
        return arrays

    return edit


def _with_nan(array: np.ndarray) -> np.ndarray:
    array = array.copy()
    array[5, 1] = np.nan
    return array


def _with_inf(array: np.ndarray) -> np.ndarray:
    array = array.copy()
    array[2] = np.inf
    return array


BAD_D4RL_FILES = {
    "missing key": (_without("rewards"), "'rewards'", "missing key"),
    "ragged lengths": (_set("actions", lambda a: a[:-1]), "'actions'", "expected 8"),
    "NaN observation": (_set("observations", _with_nan), "'observations'", "NaN"),
    "inf reward": (_set("rewards", _with_inf), "'rewards'", "NaN/inf"),
    "string observations": (_set("observations", lambda a: a.astype("S8")), "'observations'", "dtype"),
    "terminal flag of 2": (
        _set("terminals", lambda a: a.astype(np.int8) * 2),
        "'terminals'",
        "other than 0 and 1",
    ),
    "next_observations shape": (
        _set("next_observations", lambda a: a[:, :2]),
        "'next_observations'",
        "expected",
    ),
    "empty": (lambda arrays: {key: value[:0] for key, value in arrays.items()}, "'observations'", "empty"),
    "one number per observation": (_set("observations", lambda a: a[:, 0]), "'observations'", "(N, obs_dim)"),
    "actions with a third axis": (_set("actions", lambda a: a[..., None]), "'actions'", "(N, act_dim)"),
    "two rewards per step": (_set("rewards", lambda a: np.stack([a, a], axis=1)), "'rewards'", "expected (8,)"),
}


@pytest.mark.parametrize("case", list(BAD_D4RL_FILES))
def test_bad_d4rl_file_names_file_and_key(tmp_path: Path, case: str) -> None:
    edit, key, expected = BAD_D4RL_FILES[case]
    path = write_d4rl_file(tmp_path / "bad.hdf5", **edit(_good()))
    with pytest.raises(DatasetError) as caught:
        load_d4rl(path)
    message = str(caught.value)
    assert str(path) in message and key in message and expected in message, message
    assert "\n" not in message


def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.hdf5"
    path.write_text("not hdf5 at all")
    with pytest.raises(DatasetError, match="not a readable HDF5 file"):
        load_d4rl(path)
    with pytest.raises(DatasetError, match="not an HDF5 file"):
        load_dataset(path)


def test_truncated_file_is_reported_as_corrupt(tmp_path: Path) -> None:
    arrays = episodes_to_arrays([2000, 2000], ["terminal", "timeout"], obs_dim=17)
    path = write_d4rl_file(tmp_path / "cut.hdf5", **arrays)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetError) as caught:
        load_d4rl(path)
    assert str(path) in str(caught.value)


def test_files_with_damaged_structure_load_or_fail_in_one_line(tmp_path: Path) -> None:
    """A bad copy changes bytes anywhere. Where HDF5 keeps a file's structure (the first kilobytes:
    superblock, object headers, B-trees, heaps, attributes), h5py then raises RuntimeError, KeyError
    or ValueError as well as OSError, from wherever a reader touches the file: format detection, key
    checks, loading. Each damaged copy of a D4RL file, a d3rlpy file and a Tianshou buffer loads, or
    fails as one line naming it: 120 copies. (The HDF5 library itself may crash or hang on a rare
    copy, which nothing in Python can catch: each copy loads in a child process, and those outcomes
    are tolerated.)"""
    from test_d3rlpy import episode, write_d3rlpy_episodes
    from tianshou.data import Batch, ReplayBuffer

    from conftest import damaged_copy, in_forked_child
    from offline_rl.data import save_buffer

    d4rl = write_d4rl_file(tmp_path / "d4rl.hdf5", **episodes_to_arrays([300, 300], ["terminal", "timeout"]))
    d3rlpy = write_d3rlpy_episodes(tmp_path / "d3rlpy.h5", [episode(200, True, 0.0), episode(200, False, 1.0)])
    buffer = ReplayBuffer(400)
    for step in range(400):
        ends = {"terminated": [step % 100 == 99], "truncated": [False]}
        buffer.add(Batch(obs=[[step, 0.0]], act=[0], rew=[1.0], obs_next=[[step + 1, 0.0]], info={}, **ends))
    tianshou = save_buffer(buffer, tmp_path / "buffer.hdf5")
    rng = np.random.default_rng(0)

    def load(path: Path) -> str:
        try:
            load_dataset(path)
        except DatasetError as error:
            return f"refused: {error}"
        return "loaded"

    outcomes: list[str] = []
    for _ in range(40):
        for original in (d4rl, d3rlpy, tianshou):
            damaged = tmp_path / f"damaged-{original.name}"
            damaged.write_bytes(damaged_copy(original.read_bytes(), rng))
            outcome = in_forked_child(lambda path=damaged: load(path), timeout=30)
            assert outcome in ("loaded", "crashed", "hung") or outcome.startswith("refused: "), outcome
            if outcome.startswith("refused: "):
                assert str(damaged) in outcome and "\n" not in outcome, outcome
            outcomes.append(outcome.split(":")[0])
    assert outcomes.count("refused") > 10 and outcomes.count("loaded") > 10, outcomes  # both ways exercised


def test_a_buffer_whose_pickled_state_is_damaged_names_it(tmp_path: Path) -> None:
    """Tianshou pickles a buffer's random state into its file; a damaged module name is refused before
    anything is imported."""
    from tianshou.data import Batch, ReplayBuffer

    from offline_rl.data import save_buffer

    buffer = ReplayBuffer(4)
    for step in range(4):
        buffer.add(Batch(obs=[step], act=[0], rew=[1.0], obs_next=[step + 1], info={}, terminated=[0], truncated=[0]))
    path = save_buffer(buffer, tmp_path / "buffer.hdf5")
    with h5py.File(path, "a") as file:
        pickled = file["_random_state"][()]
        at = pickled.tobytes().index(b"numpy")
        pickled[at + 1] = ord("X")  # a module that does not exist
        file["_random_state"][()] = pickled
    for load in (load_buffer, load_dataset):
        with pytest.raises(DatasetError, match=r"buffer\.hdf5: '/_random_state' is pickled and refers to nXmpy"):
            load(path)


def test_hdf5_of_unknown_layout(tmp_path: Path) -> None:
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as file:
        file["weights"] = np.zeros(3)
    with pytest.raises(DatasetError, match="neither D4RL keys"):
        load_dataset(path)
    with pytest.raises(DatasetError, match="not a Tianshou replay buffer"):
        load_buffer(path)


def test_tianshou_buffer_files_cut_down_or_empty_name_what_is_wrong(tmp_path: Path) -> None:
    """A buffer file from an interrupted copy or another tool's writer: its missing column, or its
    emptiness, named in one line rather than a KeyError or a zero-length sample later."""
    from tianshou.data import Batch, ReplayBuffer

    from offline_rl.data import save_buffer

    buffer = ReplayBuffer(8)
    for step in range(5):
        ends = {"terminated": [step == 4], "truncated": [False]}
        buffer.add(Batch(obs=[step], act=[0], rew=[1.0], obs_next=[step + 1], info={}, **ends))
    whole = tmp_path / "whole.hdf5"
    save_buffer(buffer, whole)
    assert len(load_buffer(whole)) == 5
    without_rewards = tmp_path / "no-rew.hdf5"
    without_rewards.write_bytes(whole.read_bytes())
    with h5py.File(without_rewards, "a") as file:
        del file["_meta/rew"]
    with pytest.raises(DatasetError, match=r"^.*no-rew\.hdf5: buffer is missing key '_meta/rew'$"):
        load_buffer(without_rewards)
    empty = tmp_path / "empty.hdf5"
    ReplayBuffer(8).save_hdf5(str(empty))
    with pytest.raises(DatasetError) as caught:  # Tianshou writes no columns for it
        load_buffer(empty)
    assert str(caught.value) == f"{empty}: buffer holds no transitions"


def test_unknown_source_string() -> None:
    with pytest.raises(DatasetError, match="not a D4RL dataset name") as raised:
        load_dataset("definitely not a dataset")
    assert "did you mean" not in str(raised.value)


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("halfchetah_medium", "halfcheetah-medium-v2"),  # a typo, underscores, no version: read as nothing
        ("Hopper-Medium-Expert", "hopper-medium-expert-v2"),
        ("walker2d_medium_replay-v0", "walker2d-medium-replay-v0"),  # read as a Minari id, meant as D4RL's
        ("antmaze-umaze_diverse-v1", "antmaze-umaze-diverse-v1"),
        ("hopper-full-replay-v0", "hopper-full-replay-v2"),  # a version D4RL lacks: told one it has
        ("halfcheetah-medium-v3", "halfcheetah-medium-v2"),
    ],
)
def test_a_near_miss_of_a_d4rl_name_is_told_the_name(
    name: str, meant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))  # no Minari dataset of that id here
    with pytest.raises(DatasetError) as raised:
        load_dataset(name)
    assert str(raised.value).endswith(f"; did you mean D4RL's {meant}?")


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("d4rl_mujoco_halfcheetah/v0-medium-expert", "halfcheetah-medium-expert-v0"),  # TF-Agents' CQL README
        ("d4rl_mujoco_walker2d/v2-full-replay", "walker2d-full-replay-v2"),
        ("d4rl_antmaze/medium-play-v0", "antmaze-medium-play-v0"),
        ("d4rl_adroit_door/v1-human", "door-human-v1"),
    ],
)
def test_a_tfds_copy_of_a_d4rl_dataset_is_told_d4rls_name(
    name: str, meant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    with pytest.raises(DatasetError) as raised:
        load_dataset(name)
    message = str(raised.value)
    assert message.startswith(f"{name}: no such file or directory")  # not looked for as a Minari id
    assert message.endswith(f"; {name} is TFDS's copy of D4RL's {meant}: give {meant}, which reads D4RL's own file")


@pytest.mark.parametrize(
    "name", ["pen-human-v1", "mujoco/halfcheetah/medium-v0", "CartPole-v1", "d4rl_adroit_pen/v1-human"]
)
def test_other_dataset_ids_get_no_d4rl_suggestion(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    with pytest.raises(DatasetError) as raised:
        load_dataset(name)
    assert "did you mean" not in str(raised.value)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    """A command's `main` behind its `run_main` wrapper, in this process (`conftest.run_in_process`)."""
    script, rest = (" ".join(args[:2]), args[2:]) if args[0] == "-m" else (args[0], args[1:])
    return run_in_process(script, *rest, cwd=REPO_ROOT)


def test_converter_cli_reports_bad_file_in_one_line_exit_2(tmp_path: Path) -> None:
    path = write_d4rl_file(tmp_path / "bad.hdf5", **_without("actions")(_good()))
    output = tmp_path / "out.hdf5"
    result = _run("converters/d4rl.py", str(path), "--output", str(output))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and "'actions'" in error_lines[0] and str(path) in error_lines[0]
    assert not output.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["bad.hdf5"]  # no partial output left behind


def test_converter_cli_refuses_data_that_does_not_fit_the_task(tmp_path: Path) -> None:
    arrays = episodes_to_arrays([4, 4], ["terminal", "timeout"], obs_dim=17, act_dim=6)
    path = write_d4rl_file(tmp_path / "cheetah.hdf5", **arrays)
    output = tmp_path / "out.hdf5"
    result = _run("converters/d4rl.py", str(path), "--output", str(output), "--task", "Hopper-v4")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "observations have shape (17,), but --task Hopper-v4 observes (11,)" in result.stderr
    assert not output.exists()


@pytest.mark.parametrize("task", ["HalfCheetah-v2", "Hopper-v3"])
def test_gyms_mujoco_py_tasks_are_told_their_v4(tmp_path: Path, task: str) -> None:
    """Tianshou's offline examples and D4RL name gym's mujoco-py envs (`--task HalfCheetah-v2`); here
    they failed with gymnasium's "moved to the gymnasium-robotics project", which needs mujoco-py too."""
    result = _run("-m", "offline_rl.collect", "--task", task, "--output", str(tmp_path / "x.hdf5"), "--size", "10")
    assert result.returncode == 2 and "Traceback" not in result.stderr and "out of date" not in result.stderr
    name = task.split("-")[0]
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: --task '{task}': gym's MuJoCo {task[-2:]} envs need mujoco-py and MuJoCo 2.1, which are not "
        f"installed; {name}-v4 is the same env on today's mujoco bindings (the env D4RL's locomotion datasets "
        f"evaluate on here): --task {name}-v4"
    )
    assert not (tmp_path / "x.hdf5").exists()


def test_gyms_mujoco_py_tasks_are_told_their_v4_after_gymnasium_robotics_is_loaded() -> None:
    """Gymnasium-Robotics registers gym's mujoco-py envs again, failing with its own DependencyNotInstalled:
    a process that made a D4RL Adroit env (which loads it) first gave that message instead."""
    from offline_rl.envs.make import make_env
    from offline_rl.envs.robotics import register_robotics

    assert register_robotics()
    with pytest.raises(
        OfflineRLError, match=r"^--task 'HalfCheetah-v2': gym's MuJoCo v2 envs need mujoco-py.*HalfCheetah-v4$"
    ):
        make_env("HalfCheetah-v2")


def test_collect_cli_unknown_task_and_bad_flag(tmp_path: Path) -> None:
    result = _run(
        "-m",
        "offline_rl.collect",
        "--task",
        "NoSuchEnv-v0",
        "--output",
        str(tmp_path / "x.hdf5"),
        "--size",
        "10",
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--task 'NoSuchEnv-v0'" in result.stderr
    result = _run(
        "-m",
        "offline_rl.collect",
        "--task",
        "Pendulum-v1",
        "--output",
        str(tmp_path / "x.hdf5"),
        "--size",
        "ten",
    )
    assert result.returncode == 2 and "--size" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "x.hdf5").exists()


def test_policy_file_errors_are_one_line(tmp_path: Path) -> None:
    from offline_rl.algorithms.export.policy_file import load_policy
    from offline_rl.core.errors import OfflineRLError

    with pytest.raises(OfflineRLError, match="no such policy file"):
        load_policy(tmp_path / "absent.pt")
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"\x00not a torch file")
    with pytest.raises(OfflineRLError, match=r"not a file torch\.save wrote") as caught:
        load_policy(junk)
    assert "\n" not in str(caught.value) and "(101)" not in str(caught.value)
    assert "expected behaviour_policy.pt" in str(caught.value)


def test_checkpoint_errors_say_what_was_found_and_what_is_expected(tmp_path: Path) -> None:
    import collections

    import torch

    from offline_rl.core.errors import OfflineRLError
    from offline_rl.runs.checkpoint import load_checkpoint, restore_algorithm

    expected = "expected checkpoint.pth, policy.pth or policy_last.pth from a run's log folder"
    junk, objects, foreign = tmp_path / "junk.pth", tmp_path / "objects.pth", tmp_path / "foreign.pth"
    junk.write_bytes(b"\x00not a torch file")
    torch.save(collections.OrderedDict(layer=torch.nn.Linear(2, 2)), objects)
    torch.save({"weights": torch.zeros(2)}, foreign)
    for path, found in (
        (junk, "not a file torch.save wrote"),
        (objects, "a torch file holding Python objects"),
        (foreign, "a torch file, but not an offline_rl checkpoint"),
    ):
        with pytest.raises(OfflineRLError) as caught:
            load_checkpoint(path)
        assert found in str(caught.value) and expected in str(caught.value) and "(101)" not in str(caught.value)
    # networks of another task: both tasks are named, and the first parameter that differs
    checkpoint = {"algorithm": torch.nn.Linear(11, 3).state_dict(), "config": {"task": "Hopper-v4"}}
    with pytest.raises(OfflineRLError) as caught:
        restore_algorithm(torch.nn.Linear(17, 6), checkpoint, "policy.pth", task="HalfCheetah-v4")
    message = str(caught.value)
    assert "built for --task Hopper-v4, not for --task HalfCheetah-v4" in message and "size mismatch" in message
    # networks of the same task built with other sizes: the settings differ, not the task
    with pytest.raises(OfflineRLError) as caught:
        restore_algorithm(torch.nn.Linear(17, 6), checkpoint, "policy.pth", task="Hopper-v4")
    message = str(caught.value)
    assert "its networks were built differently, not for these settings (size mismatch" in message, message


def test_a_run_folder_as_resume_path_names_the_files_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The folder a run printed is the usual slip for --resume-path: the line names its files and what
    each is for (which one depends on what the user does next, so none is picked)."""
    import torch

    from offline_rl.cli.main import run_main
    from offline_rl.core.errors import OfflineRLError
    from offline_rl.examples import d4rl_cql as d4rl_cql_program
    from offline_rl.runs.checkpoint import load_checkpoint, save_checkpoint

    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(OfflineRLError, match=r"a folder; it holds no file a run writes \(checkpoint.pth, policy.pth"):
        load_checkpoint(run)
    for name in ("checkpoint.pth", "policy_last.pth"):
        save_checkpoint(run / name, torch.nn.Linear(2, 2))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        run_main(d4rl_cql_program.main, ["--task", "Pendulum-v1", "--resume-path", str(run)])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: --resume-path {run}: a folder; name one of its files: {run / 'checkpoint.pth'} (to go on "
        f"training), {run / 'policy_last.pth'} (the last weights)"
    )


def test_minari_nan_is_refused(tmp_path: Path) -> None:
    import warnings

    import gymnasium as gym
    import minari
    from minari.data_collector import EpisodeBuffer

    from offline_rl.data import load_minari

    observations = np.zeros((4, 2), np.float32)
    observations[2, 1] = np.nan
    episode = EpisodeBuffer(
        id=0,
        observations=observations,
        actions=np.zeros((3, 1), np.float32),
        rewards=np.zeros(3),
        terminations=np.array([0, 0, 1], bool),
        truncations=np.zeros(3, bool),
        infos={},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        minari.create_dataset_from_buffers(
            "test/nan/bad-v0",
            [episode],
            observation_space=gym.spaces.Box(-1, 1, (2,), np.float32),
            action_space=gym.spaces.Box(-1, 1, (1,), np.float32),
        )
    with pytest.raises(DatasetError, match="'observations' has 1 NaN/inf"):
        load_minari("test/nan/bad-v0")


@pytest.mark.parametrize("script", ["examples/atari_cql.py", "examples/atari_qrdqn.py"])
def test_a_continuous_task_in_the_discrete_scripts_is_one_line(script: str, tmp_path: Path) -> None:
    result = run_in_process(script, "--task", "Pendulum-v1", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --task Pendulum-v1: has Box actions, but discrete CQL and QR-DQN need discrete ones (an Atari "
        "game, CartPole-v1, ...); for continuous actions use examples/d4rl_cql.py"
    )


def test_a_missing_buffer_for_a_vector_task_names_the_recipe_for_one(tmp_path: Path) -> None:
    result = run_in_process("examples/atari_cql.py", "--task", "CartPole-v1", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    recipe = "python examples/atari_qrdqn.py --config configs/qrdqn/CartPole-v1.yaml --task CartPole-v1"
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: --load-buffer-name expert.hdf5: no such file; create one with: {recipe}, then {recipe} --watch "
        "--resume-path <the policy.pth it printed> --save-buffer-name expert.hdf5"
    )


def test_a_v4_mujoco_task_adds_no_gymnasium_notice_to_a_one_line_error(tmp_path: Path) -> None:
    result = run_repo_script(
        "examples/d4rl_cql.py",
        "--task",
        "HalfCheetah-v4",
        "--dataset",
        str(tmp_path / "missing.hdf5"),
        cwd=tmp_path,
        fresh=True,  # gymnasium's notice would come as the interpreter imports it
    )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("error: ")


# --- outputs that could not be written are refused before the work --------------------------------


def _last_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.stderr.strip().splitlines()[-1]


def test_every_program_refuses_an_output_it_could_not_write_before_starting(tmp_path: Path) -> None:
    blocker = tmp_path / "notes.txt"  # a file where a folder would have to be
    blocker.write_text("x")
    dataset = write_d4rl_file(tmp_path / "data.hdf5", **_good())
    cache = tmp_path / "cache"
    cases = {
        ("-m", "offline_rl.collect", "--task", "Pendulum-v1", "--size", "50", "--output", f"{blocker}/p.hdf5"): (
            f"error: --output {blocker}/p.hdf5: {blocker} is a file, not a folder"
        ),
        (
            "-m",
            "offline_rl.collect",
            "--task",
            "Pendulum-v1",
            "--size",
            "50",
            "--output",
            str(tmp_path),
            "--overwrite",
        ): (f"error: --output {tmp_path}: is a folder; expected a file name"),
        ("converters/d4rl.py", str(dataset), "--output", f"{blocker}/b.hdf5"): (
            f"error: --output {blocker}/b.hdf5: {blocker} is a file, not a folder"
        ),
        ("examples/d4rl_cql.py", "--task", "Pendulum-v1", "--logdir", str(blocker)): (
            f"error: --logdir {blocker}: is a file; expected a folder"
        ),
        (
            "examples/atari_qrdqn.py",
            "--task",
            "CartPole-v1",
            "--watch",
            "--buffer-size",
            "20",
            "--save-buffer-name",
            str(blocker),
        ): (f"error: --save-buffer-name {blocker}: already exists (pass --overwrite to replace it)"),
    }
    for args, expected in cases.items():
        result = run_in_process(
            " ".join(args[:2]) if args[0] == "-m" else args[0],
            *(args[2:] if args[0] == "-m" else args[1:]),
            cwd=tmp_path,
            env_extra={"OFFLINE_RL_CACHE_DIR": str(cache)},
        )
        assert _last_error(result) == expected, args
    assert blocker.read_text() == "x"
    assert not cache.exists()  # d4rl_cql refused its --logdir before generating its default dataset
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.hdf5", "notes.txt"]


def test_atari_qrdqn_overwrite_replaces_the_buffer(tmp_path: Path) -> None:
    output = tmp_path / "expert.hdf5"
    output.write_text("an older buffer")
    result = run_in_process(
        "examples/atari_qrdqn.py",
        *("--task", "CartPole-v1", "--watch", "--buffer-size", "20", "--training-num", "2"),
        *("--save-buffer-name", str(output), "--overwrite"),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(load_buffer(output)) == 20


@pytest.mark.parametrize(
    ("code", "filename", "line"),
    [
        (28, "/data/out.hdf5", "error: /data/out.hdf5: No space left on device"),
        (30, "/mnt/ro/log", "error: /mnt/ro/log: Read-only file system"),
        (122, None, "error: Disk quota exceeded"),
    ],
)
def test_a_full_disk_or_a_read_only_mount_met_by_a_program_is_one_line(code, filename, line, capsys) -> None:
    import os

    from offline_rl.cli.main import run_main

    def main(argv):
        raise OSError(code, os.strerror(code), filename)

    with pytest.raises(SystemExit) as exit_:
        run_main(main, [])
    assert exit_.value.code == 2 and capsys.readouterr().err == line + "\n"


def test_other_os_errors_keep_their_traceback() -> None:
    from offline_rl.cli.main import run_main

    def main(argv):  # may be a bug: its traceback stays
        raise FileNotFoundError(2, "No such file or directory", "x")

    with pytest.raises(FileNotFoundError):
        run_main(main, [])


@pytest.mark.parametrize(
    "flag, gpus, message",
    [
        ("cuda", 0, "--device cuda: no CUDA device is available here (use --device cpu or auto)"),
        ("cuda:1", 1, "--device cuda:1: this machine has 1 CUDA device(s), cuda:0 to cuda:0"),
        ("cuda:x", 2, "--device cuda:x: expected auto, cpu, cuda or cuda:N"),
        ("mps", 0, "--device mps: expected auto, cpu, cuda or cuda:N"),
        ("cpu:0", 0, "--device cpu:0: expected auto, cpu, cuda or cuda:N"),
    ],
)
def test_a_device_this_machine_lacks_is_one_line_before_any_setup(
    flag: str, gpus: int, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch itself would fail later, mid-setup, with "invalid device ordinal" or a parse error."""
    import torch

    from offline_rl.core.errors import OfflineRLError
    from offline_rl.runs.session import pick_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    with pytest.raises(OfflineRLError) as raised:
        pick_device(flag)
    assert str(raised.value) == message


def test_a_device_this_machine_has_is_taken_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from offline_rl.runs.session import pick_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert [pick_device(flag) for flag in ("auto", "cpu", "cuda", "cuda:1")] == ["cuda", "cpu", "cuda", "cuda:1"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device("auto") == "cpu"


@pytest.mark.parametrize(
    ("kind", "key", "value"),
    [
        ("stack", "frame_index", 11),  # its next frame would be the 13th of 12
        ("stack", "frame_index", -1),
        ("stack", "episode_first_frame", 7),  # after the transition's own frame
        ("pool", "obs_frames", 12),
        ("pool", "obs_next_frames", -3),
    ],
)
def test_a_frame_buffer_whose_stacks_point_outside_its_frames_is_one_line(
    tmp_path: Path, kind: str, key: str, value: int
) -> None:
    """A damaged index would otherwise surface at the first batch that draws it, an IndexError hours into
    training (a device-side assert on a GPU), or, negative, silently wrap to another frame."""
    from offline_rl.data import save_buffer
    from offline_rl.data.frame_pool import FramePoolBuffer
    from offline_rl.data.frame_stack import FrameStackBuffer

    frames = np.arange(12, dtype=np.uint8)[:, None, None].repeat(84, axis=1).repeat(84, axis=2)
    steps = {
        "act": np.zeros(5, np.int64),
        "rew": np.ones(5),
        "terminated": np.eye(5, dtype=bool)[4],
        "truncated": [0] * 5,
    }
    if kind == "stack":
        buffer = FrameStackBuffer(frames, np.arange(2, 7), np.full(5, 2), **steps)
    else:
        stacks = np.arange(5)[:, None] + np.arange(4)
        buffer = FramePoolBuffer(frames, stacks, stacks + 1, **steps)
    path = save_buffer(buffer, tmp_path / "frames.hdf5")
    assert len(load_buffer(path)) == 5
    with h5py.File(path, "a") as file:
        column = file[key] if key in file else file[f"_meta/{key}"]
        damaged = column[()]
        damaged[3] = value  # transition 3 (its whole stack, in a pool)
        column[()] = damaged
    with pytest.raises(
        DatasetError, match=rf"frames\.hdf5: '[a-z_/]*{key}[a-z_/]*' of 1 transitions \(the first: 3\) "
    ):
        load_buffer(path)


def test_a_buffer_with_a_negative_action_is_one_line(tmp_path: Path) -> None:
    """As an index, -1 would silently pick the last action's Q-value."""
    from tianshou.data import Batch, ReplayBuffer

    from offline_rl.data import save_buffer

    buffer = ReplayBuffer(4)
    for step, action in enumerate([0, 1, -1, 1]):
        ends = {"terminated": [step == 3], "truncated": [False]}
        buffer.add(Batch(obs=[[step]], act=[action], rew=[1.0], obs_next=[[step + 1]], info={}, **ends))
    path = save_buffer(buffer, tmp_path / "buffer.hdf5")
    with pytest.raises(
        DatasetError, match=r"buffer\.hdf5: key '_meta/act' holds the integer -1; expected action indices"
    ):
        load_buffer(path)


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--batch-size", "20000000"], "--batch-size 20000000 needs "),
        (["--hidden-sizes", "60000", "60000"], "--hidden-sizes 60000 60000 needs "),
        (["--test-num", "100000"], "--test-num 100000 needs "),
        (["--cql-n-actions", "100000000"], "--cql-n-actions 100000000 needs "),  # not "--batch-size 256"
        (["--dataset-size", "1000000000000"], "--dataset-size 1000000000000 needs "),  # the data it would generate
    ],
)
def test_a_run_that_cannot_fit_in_memory_stops_before_any_network_is_built(
    flags: list[str], named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, each of these trained until the machine killed it (or built networks until the
    allocator failed with a traceback)."""
    from test_d4rl_cql_example import TINY

    from offline_rl.core import resources

    monkeypatch.setattr(resources, "available_memory", lambda: (8 << 30, "MemAvailable + SwapFree"))
    done = run_in_process("examples/d4rl_cql.py", *TINY, *flags, "--epoch", "1", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: {named}") and "of memory and 8.0 GiB are available (MemAvailable" in line, line
    assert not list(tmp_path.rglob("checkpoint.pth"))


def test_a_collection_too_large_for_the_memory_is_one_line_before_any_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, numpy's allocation error as a traceback. Pendulum: 3 floats of observation and 3 of
    the next, 1 of action, 1 of reward, two flags: 34 bytes a transition, 31.7 GiB for 10⁹."""
    from offline_rl.cli.main import run_main
    from offline_rl.collect import main as collect_main
    from offline_rl.core import resources

    monkeypatch.setattr(resources, "available_memory", lambda: (8 << 30, "MemAvailable + SwapFree"))
    with pytest.raises(SystemExit) as stopped:
        run_main(collect_main, ["--task", "Pendulum-v1", "--size", "1000000000", "--output", str(tmp_path / "x.hdf5")])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: --size 1000000000 needs 31.7 GiB of memory and 8.0 GiB are available (MemAvailable + SwapFree); "
        "lower --size"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_path_flag_with_bytes_that_are_not_utf8_is_one_line(tmp_path: Path) -> None:
    """A name in another encoding reaches Python as lone surrogates; TensorBoard's writer failed on
    it with a traceback after the run had started."""
    import os

    odd = os.fsdecode(b"log\xff")
    done = run_in_process("examples/d4rl_cql.py", "--task", "Pendulum-v1", "--logdir", odd, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: --logdir log\ufffd: holds bytes that are not UTF-8; expected a UTF-8 name"
    )
    assert list(tmp_path.iterdir()) == []
    preset = run_in_process("examples/d4rl_cql.py", "--config", odd, cwd=tmp_path)  # was "no such file", escaped
    assert preset.returncode == 2 and preset.stderr.strip().splitlines()[-1] == (
        "error: --config log\ufffd: holds bytes that are not UTF-8; expected a UTF-8 name"
    )


def test_a_discrete_run_that_cannot_fit_in_memory_stops_before_its_network_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from offline_rl.core import resources

    collect = ["--task", "CartPole-v1", "--watch", "--eps-test", "1.0", "--buffer-size", "400"]
    made = run_in_process("examples/atari_qrdqn.py", *collect, "--save-buffer-name", "cartpole.hdf5", cwd=tmp_path)
    assert made.returncode == 0, made.stderr[-2000:]
    monkeypatch.setattr(resources, "available_memory", lambda: (8 << 30, "MemAvailable + SwapFree"))
    train = ["--task", "CartPole-v1", "--load-buffer-name", "cartpole.hdf5", "--batch-size", "100000000"]
    done = run_in_process("examples/atari_cql.py", *train, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: --batch-size 100000000 needs ")


@pytest.mark.parametrize("flags", [["--training-num", "100000"], ["--hidden-sizes", "60000", "60000"]])
def test_an_online_run_that_cannot_fit_in_memory_stops_before_its_envs_are_made(
    flags: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, `--training-num 100000` built envs until the machine ran out of memory."""
    from offline_rl.core import resources

    monkeypatch.setattr(resources, "available_memory", lambda: (8 << 30, "MemAvailable + SwapFree"))
    done = run_in_process("examples/atari_qrdqn.py", "--task", "CartPole-v1", "--epoch", "1", *flags, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"error: {' '.join(flags)} needs "), done.stderr[-500:]
    assert not list(tmp_path.rglob("checkpoint.pth"))
