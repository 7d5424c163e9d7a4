"""The frame-stacked Atari buffer: stacks equal FrameStackObservation's, save/load, Tianshou protocol."""

from __future__ import annotations

from pathlib import Path

import ale_py
import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

from offline_rl.data import (
    FrameStackBufferBuilder,
    dataset_stats,
    detect_format,
    load_buffer,
    load_dataset,
    save_buffer,
)

gym.register_envs(ale_py)


@pytest.fixture(scope="module")
def pong_rollout():
    """A few random-policy Pong episodes (cut short) with the stacks the wrapper produced."""
    env = FrameStackObservation(AtariPreprocessing(gym.make("PongNoFrameskip-v4"), noop_max=30), 4)
    builder = FrameStackBufferBuilder(max_frames=64)  # small on purpose: exercises growth
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    seen = []
    for step in range(400):
        action = int(rng.integers(6))
        next_obs, reward, terminated, truncated, _ = env.step(action)
        truncated = truncated or step in (90, 91, 250)  # includes a one-step episode
        seen.append((obs, action, reward, terminated, truncated, next_obs))
        builder.add(obs, action, reward, terminated, truncated, next_obs)
        obs = next_obs
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    return builder.build(), seen


def test_stacks_equal_what_frame_stack_observation_produced(pong_rollout) -> None:
    buffer, seen = pong_rollout
    batch = buffer[np.arange(len(buffer))]
    assert batch.obs.shape == (400, 4, 84, 84) and batch.obs.dtype == np.uint8
    for index, (obs, action, reward, terminated, truncated, next_obs) in enumerate(seen):
        np.testing.assert_array_equal(batch.obs[index], obs)
        np.testing.assert_array_equal(batch.obs_next[index], next_obs)
        assert batch.act[index] == action and batch.rew[index] == np.float32(reward)
        # the data's last step closes its episode as a truncation (the data stops there)
        assert batch.done[index] == (terminated or truncated or index == len(seen) - 1)
    # episode starts repeat their first frame, as the wrapper's reset padding does
    start = 92
    assert all(np.array_equal(batch.obs[start][k], batch.obs[start][3]) for k in range(3))


def test_each_frame_is_stored_once(pong_rollout) -> None:
    buffer, _ = pong_rollout
    episodes = int(buffer.done.sum())
    assert buffer.frames.shape[0] == len(buffer) + episodes
    assert buffer.nbytes / len(buffer) < 7200  # ~7 KB a transition instead of 56 KB for obs + obs_next


def test_save_load_round_trip_through_load_buffer(pong_rollout, tmp_path: Path) -> None:
    buffer, _ = pong_rollout
    for compression in (None, "gzip"):
        path = save_buffer(buffer, tmp_path / f"pong-{compression}.hdf5", compression=compression)
        assert detect_format(path) == "tianshou"
        restored = load_buffer(path)
        assert type(restored).__name__ == "FrameStackBuffer" and len(restored) == len(buffer)
        indices = np.array([0, 5, 91, 92, 399])
        expected, got = buffer[indices], restored[indices]
        for key in ("obs", "obs_next", "act", "rew", "terminated", "truncated", "done"):
            np.testing.assert_array_equal(got[key], expected[key], err_msg=key)
        np.testing.assert_array_equal(restored.next(indices), buffer.next(indices))
    assert len(load_dataset(path)) == len(buffer)
    stats = dataset_stats(restored)
    assert stats.transitions == 400 and stats.episodes == int(buffer.done.sum())


def test_sampling_follows_tianshou_protocol(pong_rollout) -> None:
    buffer, _ = pong_rollout
    batch, indices = buffer.sample(32)
    assert batch.obs.shape == (32, 4, 84, 84) and len(indices) == 32
    assert buffer[3].obs.shape == (4, 84, 84)


def test_several_collections_load_as_one_buffer(pong_rollout, tmp_path: Path) -> None:
    from offline_rl.data import load_buffers

    buffer, _ = pong_rollout
    paths = [save_buffer(buffer, tmp_path / f"part{i}.hdf5") for i in range(2)]
    combined = load_buffers(paths)
    assert type(combined).__name__ == "FrameStackBuffer" and len(combined) == 2 * len(buffer)
    indices = np.array([0, 91, 399])
    for key in ("obs", "obs_next", "act", "done"):
        np.testing.assert_array_equal(combined[indices + len(buffer)][key], buffer[indices][key], err_msg=key)
    assert combined.next(np.array([len(buffer) - 1]))[0] == len(buffer) - 1  # the first file's last episode ends
