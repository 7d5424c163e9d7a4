"""D4RL's recipe (`python -m offline_rl.collect --recipe <env>-<kind>`): which snapshot is the medium
policy, and each kind's file against what it is made of — the collections of the chosen policies with
the same seed, the behaviour run's replay until the medium policy, the two one after the other."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import run_in_process
from offline_rl.core.errors import OfflineRLError
from offline_rl.runs.recipes import BehaviourRun, parse_recipe

KEYS = ("observations", "actions", "rewards", "terminals", "timeouts", "next_observations")


@pytest.fixture(scope="module")
def behaviour_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Hopper SAC run of `examples/mujoco_sac.py`: four snapshots, its replay kept whole."""
    folder = tmp_path_factory.mktemp("behaviour")
    flags = ["--task", "Hopper-v4", "--epoch", "4", "--step-per-epoch", "60", "--start-timesteps", "40"]
    flags += ["--hidden-sizes", "16", "--test-num", "2", "--batch-size", "16", "--buffer-size", "1000"]
    done = run_in_process("examples/mujoco_sac.py", *flags, cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = (folder / "log/Hopper-v4/sac/0").iterdir()
    return run


def collect(tmp_path: Path, *flags: str) -> dict[str, np.ndarray]:
    output = tmp_path / f"{len(list(tmp_path.iterdir()))}.hdf5"
    done = run_in_process("-m offline_rl.collect", *flags, "--output", str(output), "--progress", "false", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    with h5py.File(output, "r") as file:
        columns = {key: file[key][()] for key in KEYS}
        columns["metadata"] = {key: file["metadata"][key][()] for key in file["metadata"]}
    return columns


def same_rows(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return all(np.array_equal(a[key], b[key]) for key in KEYS)


def test_the_medium_policy_is_the_earliest_snapshot_reaching_a_third_of_the_experts() -> None:
    scores = [5.0, 20.0, 41.0, 35.0, 90.0]  # expert 90: the bar is 30, first reached by the third
    run = BehaviourRun(
        Path("run"), [{"epoch": i + 1, "normalized_score": s, "file": f"{i}"} for i, s in enumerate(scores)]
    )
    assert run.medium()["epoch"] == 3 and run.expert()["epoch"] == 5
    returns = [-100.0, 10.0, 20.0, 60.0]  # no normalised score: the returns themselves
    entries = [{"epoch": i + 1, "return_mean": r, "file": f"{i}"} for i, r in enumerate(returns)]
    run = BehaviourRun(Path("run"), entries)
    assert run.medium()["epoch"] == 3


@pytest.mark.parametrize("name", ["hopper-large", "pendulum-medium", "hopper", "medium"])
def test_an_unknown_recipe_is_one_line(tmp_path: Path, name: str) -> None:
    with pytest.raises(OfflineRLError, match=rf"^--recipe {name}: expected <env>-<kind>, env one of halfcheetah"):
        parse_recipe(name)
    done = run_in_process("-m offline_rl.collect", "--recipe", name, "--output", "x.hdf5", cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "--recipe" in done.stderr


def test_medium_and_expert_are_their_snapshots_collections_and_medium_expert_both(
    behaviour_run: Path, tmp_path: Path
) -> None:
    snapshots = json.loads((behaviour_run / "snapshots/returns.json").read_text())
    run = BehaviourRun(behaviour_run, snapshots)
    medium, expert = run.file(run.medium()), run.file(run.expert())
    common = ["--size", "150", "--seed", "3"]
    recipe = ["--behaviour-run", str(behaviour_run)]
    made = {kind: collect(tmp_path, "--recipe", f"hopper-{kind}", *recipe, *common) for kind in ("medium", "expert")}
    alone = {  # D4RL's collections drew from the policy's Gaussian
        "medium": collect(tmp_path, "--task", "Hopper-v4", "--policy", str(medium), "--sample-policy", *common),
        "expert": collect(tmp_path, "--task", "Hopper-v4", "--policy", str(expert), "--sample-policy", *common),
    }
    for kind in ("medium", "expert"):
        assert same_rows(made[kind], alone[kind])
        assert made[kind]["metadata"]["recipe"] == f"hopper-{kind}".encode()
        assert made[kind]["metadata"]["seed"] == 3
    both = collect(tmp_path, "--recipe", "hopper-medium-expert", *recipe, *common)
    assert all(np.array_equal(both[key], np.concatenate([alone["medium"][key], alone["expert"][key]])) for key in KEYS)
    assert both["metadata"]["policy"] == f"{medium} then {expert}".encode()
    again = collect(tmp_path, "--recipe", "hopper-medium-expert", *recipe, *common)
    assert same_rows(both, again)  # deterministic from its policy files and seed
    assert [path.name for path in tmp_path.iterdir() if "collecting" in path.name] == []


def test_medium_replay_is_the_replay_until_the_medium_policy(behaviour_run: Path, tmp_path: Path) -> None:
    snapshots = json.loads((behaviour_run / "snapshots/returns.json").read_text())
    steps = int(BehaviourRun(behaviour_run, snapshots).medium()["env_steps"])
    made = collect(tmp_path, "--recipe", "hopper-medium-replay", "--behaviour-run", str(behaviour_run))
    with h5py.File(behaviour_run / "replay.hdf5", "r") as file:
        replay = file["0"]
        assert len(made["rewards"]) == steps < len(replay["rew"])
        np.testing.assert_array_equal(made["observations"], replay["obs"][:steps].astype(np.float32))  # D4RL's dtype
        np.testing.assert_array_equal(made["next_observations"], replay["obs_next"][:steps].astype(np.float32))
        np.testing.assert_array_equal(made["actions"], replay["act"][:steps].astype(np.float32))
        np.testing.assert_array_equal(made["terminals"], replay["terminated"][:steps])
        cut = replay["truncated"][:steps].copy()
    cut[-1] = cut[-1] or not made["terminals"][-1]  # the replay is cut there: a time-out
    np.testing.assert_array_equal(made["timeouts"], cut)
    assert made["metadata"]["recipe"] == b"hopper-medium-replay"


def test_random_is_the_uniform_collection(tmp_path: Path) -> None:
    made = collect(tmp_path, "--recipe", "hopper-random", "--size", "120")
    assert same_rows(made, collect(tmp_path, "--task", "Hopper-v4", "--size", "120"))
    assert made["metadata"]["recipe"] == b"hopper-random" and made["metadata"]["policy"] == b"random"


def test_a_recipe_without_its_behaviour_run_or_with_another_tasks_is_one_line(
    behaviour_run: Path, tmp_path: Path
) -> None:
    done = run_in_process("-m offline_rl.collect", "--recipe", "hopper-medium", "--output", "x.hdf5", cwd=tmp_path)
    assert done.returncode == 2 and "--behaviour-run: required" in done.stderr
    flags = ["--recipe", "walker2d-expert", "--behaviour-run", str(behaviour_run), "--output", "x.hdf5"]
    done = run_in_process("-m offline_rl.collect", *flags, cwd=tmp_path)
    assert done.returncode == 2 and "trained on Hopper-v4, not Walker2d-v4" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "x.hdf5").exists()


def test_sampling_a_policy_file_without_its_gaussian_is_one_line(tmp_path: Path) -> None:
    from offline_rl.algorithms.export.policy_file import PolicyNetwork, save_policy

    mean_only = save_policy(PolicyNetwork(11, 3, [8], task="Hopper-v4"), tmp_path / "mean.pt")
    flags = ["--policy", str(mean_only), "--sample-policy", "--size", "50", "--output", "x.hdf5"]
    done = run_in_process("-m offline_rl.collect", *flags, cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert f"--sample-policy: {mean_only} holds no Gaussian to sample (a mean only)" in done.stderr


@pytest.mark.parametrize(
    ("returns", "message"),
    [
        ("{not json", "returns.json: not readable JSON"),
        ('{"epoch": 1}', "returns.json: expected examples/mujoco_sac.py's list of snapshots"),
        ('[{"epoch": 1, "file": "epoch-0001.pt"}]', "returns.json: expected examples/mujoco_sac.py's list"),
        ('[{"epoch": 1, "env_steps": 5, "file": "../../x.pt", "return_mean": 1}]', "returns.json: expected"),
        ('[{"epoch": "1", "env_steps": 5, "file": "e.pt", "return_mean": 1}]', "returns.json: expected"),
    ],
)
def test_a_damaged_snapshot_list_is_one_line(tmp_path: Path, returns: str, message: str) -> None:
    (tmp_path / "run/snapshots").mkdir(parents=True)
    (tmp_path / "run/snapshots/returns.json").write_text(returns)
    flags = ["--recipe", "hopper-medium", "--behaviour-run", "run", "--output", "x.hdf5"]
    done = run_in_process("-m offline_rl.collect", *flags, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr


def test_a_damaged_replay_is_one_line(behaviour_run: Path, tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(behaviour_run, run)
    (run / "replay.hdf5").write_bytes(b"not an HDF5 file")
    flags = ["--recipe", "hopper-medium-replay", "--behaviour-run", str(run), "--output", "x.hdf5"]
    done = run_in_process("-m offline_rl.collect", *flags, cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert f"{run / 'replay.hdf5'}: not a readable HDF5 file" in done.stderr and not (tmp_path / "x.hdf5").exists()
