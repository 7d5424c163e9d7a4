"""The frame-stacked Atari buffer: stacks equal FrameStackObservation's, save/load, Tianshou protocol."""

from __future__ import annotations

import weakref
from pathlib import Path

import ale_py
import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

from conftest import synthetic_frame_stack_buffer
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
    from offline_rl.data.transitions import source_of_index

    np.testing.assert_array_equal(source_of_index(combined, indices + len(buffer) - 1), [0, 1, 1])  # --batch-per-file


def _peak_bytes(work):
    import tracemalloc

    tracemalloc.start()
    try:
        result = work()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_several_collections_load_with_one_file_beside_the_result(tmp_path: Path) -> None:
    """Loading 5 files of 1M Atari transitions must not need twice their 35 GB."""
    from offline_rl.data import load_buffers

    parts = [synthetic_frame_stack_buffer(2000, seed) for seed in range(4)]
    paths = [save_buffer(part, tmp_path / f"part{i}.hdf5") for i, part in enumerate(parts)]
    combined, peak = _peak_bytes(lambda: load_buffers(paths))
    result = combined.frames.nbytes
    assert peak < result + 1.5 * parts[0].frames.nbytes  # was 2 × result: every file, then their copy
    offset = len(parts[0].frames) + len(parts[1].frames)
    np.testing.assert_array_equal(combined.frames[offset : offset + len(parts[2].frames)], parts[2].frames)
    np.testing.assert_array_equal(combined[np.arange(4000, 6000)].obs, parts[2][np.arange(2000)].obs)


def test_a_collection_merges_its_envs_recordings_freeing_each_as_it_goes() -> None:
    from offline_rl.data.frame_stack import merge_frame_stack_buffers
    from offline_rl.runs.discrete_collection import _emptied

    builders = []
    for seed in range(4):
        builder = FrameStackBufferBuilder(max_frames=2100)
        part = synthetic_frame_stack_buffer(2000, seed)
        builder.extend(
            {
                "frame_start": np.array(0),
                "frames": part.frames,
                "frame_index": part.frame_index,
                "episode_first_frame": part.episode_first_frame,
                "act": part.act,
                "rew": part.rew,
                "terminated": part.terminated,
                "truncated": part.truncated,
            }
        )
        builders.append(builder)
    expected = merge_frame_stack_buffers([builder.build() for builder in builders])
    frames = sum(builder.position()[1] for builder in builders)
    alive = [weakref.ref(builder) for builder in builders]
    del part, builder
    merged, peak = _peak_bytes(lambda: merge_frame_stack_buffers(_emptied(builders), total_frames=frames))
    assert not builders and all(ref() is None for ref in alive)  # each dropped once merged
    # the builders' frames were allocated before tracing: only the result and bookkeeping are new
    assert peak < 1.1 * merged.frames.nbytes
    np.testing.assert_array_equal(merged.frames, expected.frames)
    indices = np.arange(len(expected))
    for key in ("obs", "obs_next", "act", "rew", "terminated", "truncated"):
        np.testing.assert_array_equal(merged[indices][key], expected[indices][key], err_msg=key)
