"""Gymnasium-Robotics' maze envs leave no model file in the temporary folder (offline_rl.envs.robotics)."""

from __future__ import annotations

import tempfile

import gymnasium as gym
import pytest

import forked
from offline_rl.envs.make import make_env
from offline_rl.envs.robotics import keep_maze_models_private

MAZES = ("AntMaze_UMaze-v3", "AntMaze_UMaze-v4", "AntMaze_UMaze-v5", "PointMaze_UMaze-v3", "PointMaze_Medium-v3")


@pytest.fixture
def temporary_folder(tmp_path, monkeypatch):
    """The system's temporary folder, as tempfile sees it, pointed at an empty folder of the test's."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


@pytest.mark.filterwarnings("ignore:.*is out of date")
@pytest.mark.parametrize("task", MAZES)
def test_a_maze_env_leaves_the_temporary_folder_as_it_found_it(task, temporary_folder):
    env = make_env(task)
    observation, _ = env.reset(seed=0)
    for _ in range(3):
        observation, *_ = env.step(env.action_space.sample())
    assert env.observation_space.contains(observation)
    env.close()
    assert list(temporary_folder.iterdir()) == []  # before: ant_maze<time>.xml (ant_maze.xml for v3)


@pytest.mark.filterwarnings("ignore:.*is out of date")
def test_envs_made_by_gymnasium_itself_and_side_by_side_are_private_too(temporary_folder):
    make_env("AntMaze_UMaze-v5")  # registers Gymnasium-Robotics and installs the private folders
    first, second = gym.make("PointMaze_UMaze-v3"), gym.make("AntMaze_UMaze-v3")  # v3: one fixed file name before
    first.reset(seed=1), second.reset(seed=1)
    assert first.unwrapped.tmp_xml_file_path != second.unwrapped.tmp_xml_file_path
    assert list(temporary_folder.iterdir()) == []
    first.close(), second.close()


def test_installing_twice_wraps_once():
    from gymnasium_robotics.envs.maze import ant_maze_v5

    make_env("AntMaze_UMaze-v5")
    installed = ant_maze_v5.AntMazeEnv.__init__
    keep_maze_models_private()
    assert ant_maze_v5.AntMazeEnv.__init__ is installed
    assert not hasattr(installed.__wrapped__, "__offline_rl_private_model__")


def test_evaluation_workers_in_their_own_processes_leave_nothing(tmp_path):
    """What an evaluation of a Minari maze dataset makes: envs in SubprocVectorEnv workers, in a
    process of its own whose temporary folder (TMPDIR) is the test's."""
    import sys

    from conftest import script_env

    program = (
        "import functools, warnings\n"
        "warnings.simplefilter('ignore')\n"
        "from tianshou.env import SubprocVectorEnv\n"
        "from offline_rl.envs.make import make_env\n"
        "tasks = ('PointMaze_UMaze-v3', 'AntMaze_UMaze-v4')\n"
        "envs = SubprocVectorEnv([functools.partial(make_env, task) for task in tasks])\n"
        "envs.reset(seed=0)\n"
        "envs.close()\n"
        "print('made')\n"
    )
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    done = forked.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env={**script_env(), "TMPDIR": str(temporary)}
    )
    assert done.returncode == 0 and done.stdout.strip() == "made", done.stderr[-2000:]
    assert [path.name for path in temporary.iterdir() if "maze" in path.name] == []
