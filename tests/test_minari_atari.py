"""Minari's Atari datasets (raw RGB screens of `ALE/<Game>-v5`) train discrete CQL and evaluate on the env
they record, the data's frames and the evaluation env's made by one conversion.

Before, `atari_cql.py --load-buffer-name atari/breakout/expert-v0` stopped: observations of shape
(210, 160, 3) where the pipeline stacks 84×84 frames, with advice to record a buffer of its own."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from conftest import record_minari_dataset, run_in_process
from offline_rl.algorithms.export.standalone import file_metadata
from offline_rl.core.errors import DatasetError
from offline_rl.data import dataset_info, load_minari_atari
from offline_rl.envs.atari import make_screen_frames_env, screen_frames
from offline_rl.envs.make import make_env


def recorded_spec(game: str, max_episode_steps: int = 27_000) -> gym.envs.registration.EnvSpec:
    """The env spec Minari's atari/<game>/expert-v0 records: RGB screens, the emulator skipping 4 frames,
    no sticky actions, the minimal action set, 108 000 frames."""
    make_env(f"ALE/{game}-v5").close()  # registers ale-py's ids
    registered = gym.spec(f"ALE/{game}-v5")
    kwargs = {"obs_type": "rgb", "repeat_action_probability": 0, "full_action_space": False, "frameskip": 4}
    kwargs |= {"max_num_frames_per_episode": 108_000}
    return dataclasses.replace(registered, kwargs={**registered.kwargs, **kwargs}, max_episode_steps=max_episode_steps)


@pytest.mark.parametrize("game", ["Breakout", "Pong"])
def test_a_screens_frames_are_gymnasiums_atari_preprocessing_of_the_same_screen(game: str) -> None:
    """ALE's grayscale and gymnasium's 84×84 shrinking, from the RGB screen alone (no max-pooling: the
    emulator skipped the frames itself)."""
    from gymnasium.wrappers import AtariPreprocessing

    rgb = make_env(f"ALE/{game}-v5", spec=recorded_spec(game))
    gray = AtariPreprocessing(
        make_env(f"ALE/{game}-v5", frameskip=4, repeat_action_probability=0), noop_max=0, frame_skip=1
    )
    screen, _ = rgb.reset(seed=3)
    frame, _ = gray.reset(seed=3)
    rng = np.random.default_rng(0)
    for _ in range(60):
        np.testing.assert_array_equal(screen_frames(screen[None])[0], frame)
        action = int(rng.integers(rgb.action_space.n))
        screen, frame = rgb.step(action)[0], gray.step(action)[0]


def test_the_loaded_stacks_are_the_stacks_the_recorded_env_hands_out(tmp_path: Path) -> None:
    spec = recorded_spec("Breakout")
    recording = make_env(spec.id, spec=spec)
    # stored raw, as Minari 0.5.2 stored its atari/* datasets (0.5.4 JPEG-encodes images unless told not to)
    (episode, *_) = record_minari_dataset("atari/breakout/test-v0", recording, 150, None, jpeg_encoding=False)
    recording.close()
    buffer = load_minari_atari("atari/breakout/test-v0", stack_num=4)
    info = dataset_info(buffer)
    assert (info["task"], info["atari_screens"]) == ("ALE/Breakout-v5", True)
    first = buffer[0].obs
    assert first.shape == (4, 84, 84) and all((first[k] == first[0]).all() for k in range(4))  # padded by repeats
    # The same game replayed in the evaluation env: every stack it shows is the one the buffer holds.
    env = make_screen_frames_env(spec, 4)
    obs, _ = env.reset(seed=0)
    for step, action in enumerate(episode.actions):
        stored = buffer[step]
        np.testing.assert_array_equal(stored.obs, obs)
        obs, reward, terminated, _, _ = env.step(int(action))
        np.testing.assert_array_equal(stored.obs_next, obs)
        assert (stored.act, stored.rew, stored.terminated) == (action, np.float32(reward), terminated)
    env.close()


def test_a_dataset_of_other_observations_is_told_what_was_expected(tmp_path: Path) -> None:
    record_minari_dataset("test/cartpole/random-v0", make_env("CartPole-v1"), 50, None)
    with pytest.raises(DatasetError, match=r"expected ALE's RGB screens, Box\(0, 255, \(210, 160, 3\), uint8\)"):
        load_minari_atari("test/cartpole/random-v0")


def test_atari_cql_trains_on_minari_screens_and_plays_the_recorded_env(tmp_path: Path) -> None:
    spec = recorded_spec("Breakout", max_episode_steps=100)  # short games: an untrained policy may never serve
    record_minari_dataset("atari/breakout/expert-v0", make_env(spec.id, spec=spec), 120, None)
    small = ("--epoch", "1", "--step-per-epoch", "3", "--test-num", "1", "--batch-size", "8", "--num-quantiles", "8")
    result = run_in_process(
        "examples/atari_cql.py", "--load-buffer-name", "atari/breakout/expert-v0", *small, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "task: ALE/Breakout-v5, the env of atari/breakout/expert-v0" in result.stdout
    assert "evaluation env: ALE/Breakout-v5 as the dataset records it (" in result.stdout
    assert "frameskip=4" in result.stdout and "obs_type=rgb" in result.stdout
    assert "as the dataset records it, its screens as 84×84 grayscale frames" in result.stdout
    assert "done: ALE/Breakout-v5 on atari/breakout/expert-v0" in result.stdout
    (policy,) = (tmp_path / "log").rglob("policy_last.pth")
    watched = run_in_process("examples/atari_cql.py", "--watch", "--resume-path", str(policy), cwd=tmp_path)
    assert watched.returncode == 0, watched.stderr[-2000:]
    assert "evaluation env: ALE/Breakout-v5 as the dataset records it (" in watched.stdout
    # An exported policy's env spec rebuilds that env with gymnasium's own wrappers: no offline_rl needed.
    exported = run_in_process(
        "examples/atari_cql.py", "--resume-path", str(policy), "--export-policy", "breakout.pt2", cwd=tmp_path
    )
    assert exported.returncode == 0, exported.stderr[-2000:]
    recorded = gym.envs.registration.EnvSpec.from_json(file_metadata(tmp_path / "breakout.pt2")["env_spec"])
    assert [wrapper.name for wrapper in recorded.additional_wrappers] == ["AtariPreprocessing", "FrameStackObservation"]
    rebuilt = gym.make(recorded)
    assert rebuilt.observation_space.shape == (4, 84, 84)
    rebuilt.close()


def test_another_spelling_of_the_game_is_warned_that_its_frames_differ(tmp_path: Path) -> None:
    from offline_rl.data.fit import TaskMismatchWarning

    spec = recorded_spec("Pong", max_episode_steps=50)
    record_minari_dataset("atari/pong/test-v0", make_env(spec.id, spec=spec), 60, None)
    small = ("--epoch", "1", "--step-per-epoch", "2", "--test-num", "1", "--batch-size", "8", "--num-quantiles", "8")
    data = ("--load-buffer-name", "atari/pong/test-v0", *small)
    with pytest.warns(TaskMismatchWarning) as caught:
        result = run_in_process("examples/atari_cql.py", "--task", "PongNoFrameskip-v4", *data, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "evaluation env:" not in result.stdout
    assert [str(warning.message) for warning in caught if warning.category is TaskMismatchWarning] == [
        "atari/pong/test-v0 holds ALE/Pong-v5's screens, but --task PongNoFrameskip-v4 plays --eval-env sticky's "
        "protocol, whose frames are max-pooled over two emulator frames where the data's are not; give --task "
        "ALE/Pong-v5 (or none) to play the env the data records"
    ]
