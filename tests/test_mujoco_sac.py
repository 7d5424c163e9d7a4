"""The online SAC behaviour trainer (`examples/mujoco_sac.py`): each trained evaluation leaves the
policy it scored as a policy file with its returns, the file `collect --policy` plays; a resumed run
goes on with its replay and adds the next snapshots."""

from __future__ import annotations

import json
import re
from pathlib import Path

import gymnasium as gym
import h5py
import numpy as np
import pytest
import torch
from tianshou.data import Batch

from conftest import run_in_process
from offline_rl.algorithms.export.policy_file import load_policy
from offline_rl.cli.mujoco_sac import MujocoSACConfig, build_sac, export_sac_actor

SMALL_RUN = [
    "--task", "InvertedPendulum-v4", "--step-per-epoch", "100", "--start-timesteps", "50", "--hidden-sizes", "16",
    "--test-num", "2", "--batch-size", "16", "--buffer-size", "1000", "--seed", "1",
]  # fmt: skip


def test_a_snapshot_acts_as_sacs_deterministic_evaluation(tmp_path: Path) -> None:
    env = gym.make("Hopper-v4")
    torch.manual_seed(0)
    algorithm = build_sac(MujocoSACConfig(hidden_sizes=[32, 24]), env, "cpu")
    with torch.no_grad():  # weights far from their start, so that a wrong layer or scale shows
        for parameter in algorithm.policy.actor.parameters():
            parameter.normal_(0, 0.5)
    file = export_sac_actor(algorithm, env, tmp_path / "snapshot.pt", task="Hopper-v4")
    observations = np.random.default_rng(0).normal(size=(64, 11)).astype(np.float32)
    algorithm.policy.eval()
    with torch.no_grad():
        squashed = algorithm.policy(Batch(obs=observations, info=Batch())).act
    expected = algorithm.policy.map_action(squashed.numpy())
    snapshot = load_policy(file)
    with torch.no_grad():
        acted = snapshot(torch.as_tensor(observations)).numpy()
    assert snapshot.task == "Hopper-v4" and snapshot.hidden_sizes == [32, 24]
    np.testing.assert_allclose(acted, expected, rtol=1e-5, atol=1e-6)
    assert np.abs(expected).max() > 0.5  # the actions reach into the bounds: the tanh and scale are checked

    # Sampled: tanh(μ + σ ε) scaled, with σ = exp(clamp(log σ, -20, 2)) from SAC's own actor, ε the draws.
    with torch.no_grad():
        (mean, std), _ = algorithm.policy.actor(observations)
    draws = np.random.default_rng(5).standard_normal(size=tuple(mean.shape))
    expected = algorithm.policy.map_action(np.tanh(mean.numpy() + std.numpy() * draws))
    sampled = snapshot.sample(observations, np.random.default_rng(5))
    np.testing.assert_allclose(sampled, expected, rtol=1e-5, atol=1e-5)
    assert not np.allclose(sampled, acted, atol=1e-3)  # the draws moved the actions


def test_each_evaluation_leaves_its_snapshot_and_a_resumed_run_adds_the_next(tmp_path: Path) -> None:
    first = run_in_process("examples/mujoco_sac.py", *SMALL_RUN, "--epoch", "2", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    (run,) = (tmp_path / "log/InvertedPendulum-v4/sac/1").iterdir()
    printed = [float(r) for r in re.findall(r"evaluation \d \(2 episodes\): return (-?[\d.]+)", first.stdout)]
    returns = json.loads((run / "snapshots/returns.json").read_text())
    assert [entry["epoch"] for entry in returns] == [1, 2] and [entry["env_steps"] for entry in returns] == [150, 250]
    assert [round(entry["return_mean"], 2) for entry in returns] == printed
    assert [entry["file"] for entry in returns] == ["epoch-0001.pt", "epoch-0002.pt"]
    last = load_policy(run / "snapshots/epoch-0002.pt")
    assert last.task == "InvertedPendulum-v4"

    resumed = run_in_process(
        "examples/mujoco_sac.py", "--resume-path", str(run / "checkpoint.pth"), "--epoch", "3", cwd=tmp_path
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "replay: restored 250 transitions" in resumed.stdout + resumed.stderr
    returns = json.loads((run / "snapshots/returns.json").read_text())
    assert [entry["epoch"] for entry in returns] == [1, 2, 3]  # epoch 2's evaluation made again, not added twice
    summary = json.loads((run / "summary.json").read_text())
    assert summary["total_env_steps"] == 300 and summary["env_steps"] == 100

    collected = run_in_process(
        "-m offline_rl.collect", "--policy", str(run / "snapshots/epoch-0003.pt"), "--size", "200",
        "--output", str(tmp_path / "medium.hdf5"), "--progress", "false", cwd=tmp_path,
    )  # fmt: skip
    assert collected.returncode == 0, collected.stderr[-3000:]
    assert "wrote " in collected.stdout and "200 transitions" in collected.stdout


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--buffer-size", "0"], "--buffer-size 0: expected at least 1"),
        (["--buffer-size", "100000000000"], "--buffer-size 100000000000: the replay, once full, needs"),
        (["--task", "CartPole-v1"], "--task CartPole-v1: SAC needs a continuous (Box) action space"),
    ],
)
def test_bad_settings_are_one_line(tmp_path: Path, flags: list[str], message: str) -> None:
    result = run_in_process("examples/mujoco_sac.py", *flags, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr


def test_a_run_stopped_and_resumed_trains_as_the_one_never_stopped(tmp_path: Path) -> None:
    """The training envs are put back where they were in their episodes (positions, velocities, time
    limit, reset noise generator), the replay's running episodes go on uncut, and the trainer does not
    reset the collector: two epochs straight and one epoch resumed to two end in the same weights,
    optimiser states, replay and generators (before, the resumed run started new episodes)."""
    from test_exact_resume import assert_resume_is_exact, run_folder

    stopped = assert_resume_is_exact("examples/mujoco_sac.py", list(SMALL_RUN), tmp_path)
    kept = torch.load(stopped / "checkpoint.pth", weights_only=True)["training_envs"]
    assert len(kept["states"]) == 1 and len(kept["states"][0]["qpos"]) == 2  # InvertedPendulum's two joints
    # the replays too, transition for transition: the episode running at the stop went on, uncut
    with (
        h5py.File(stopped / "replay.hdf5") as resumed,
        h5py.File(run_folder(tmp_path / "straight") / "replay.hdf5") as straight,
    ):
        for key in ("obs", "act", "rew", "terminated", "truncated", "obs_next"):
            np.testing.assert_array_equal(resumed["0"][key][:], straight["0"][key][:], err_msg=key)


def test_a_task_beyond_gymnasiums_mujoco_ones_trains_and_resumes(tmp_path: Path) -> None:
    """Pendulum's episode is not the simulator's state alone: its checkpoint keeps no env state, and the
    resumed run starts new episodes (its replay's running episode cut), rather than failing at the checkpoint."""
    flags = [flag if flag != "InvertedPendulum-v4" else "Pendulum-v1" for flag in SMALL_RUN]
    first = run_in_process("examples/mujoco_sac.py", *flags, "--epoch", "1", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    (run,) = (tmp_path / "log/Pendulum-v1/sac/1").iterdir()
    assert "training_envs" not in torch.load(run / "checkpoint.pth", weights_only=True)
    resumed = run_in_process(
        "examples/mujoco_sac.py", "--resume-path", str(run / "checkpoint.pth"), "--epoch", "2", cwd=tmp_path
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "replay: restored 150 transitions" in resumed.stdout + resumed.stderr
