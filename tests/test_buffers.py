"""Tianshou HDF5 buffers: round trips, frame-stacked buffers, detection by content."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tianshou.data import Batch, ReplayBuffer

from conftest import episodes_to_arrays, write_d4rl_file
from offline_rl.data import dataset_info, detect_format, load_buffer, load_d4rl, load_dataset, save_buffer


def test_save_load_round_trip_keeps_arrays_and_metadata(tmp_path: Path) -> None:
    arrays = episodes_to_arrays([3, 5, 2], ["terminal", "timeout", "terminal"])
    original = load_d4rl(write_d4rl_file(tmp_path / "halfcheetah_medium-v2.hdf5", **arrays))
    path = save_buffer(original, tmp_path / "buffer.weird-extension")
    restored = load_buffer(path)
    assert len(restored) == len(original)
    for key in ("obs", "act", "rew", "terminated", "truncated", "done", "obs_next"):
        np.testing.assert_array_equal(getattr(restored, key), getattr(original, key), err_msg=key)
    assert dataset_info(restored) == dataset_info(original)
    assert dataset_info(restored)["ref_min_score"] == -280.178953
    # Sampling and episode navigation behave identically after the round trip.
    np.testing.assert_array_equal(restored.next(np.arange(10)), original.next(np.arange(10)))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_frame_stacked_tianshou_buffer_loads_with_its_stacking(tmp_path: Path) -> None:
    buffer = ReplayBuffer(20, stack_num=4, ignore_obs_next=True, save_only_last_obs=True)
    for step in range(12):
        frame = np.full((4, 6, 6), step, dtype=np.uint8)
        done = step in (4, 11)
        buffer.add(
            Batch(
                obs=frame,
                act=step % 3,
                rew=1.0,
                terminated=done,
                truncated=False,
                obs_next=frame + 1,
                info={},
            )
        )
    path = tmp_path / "atari.hdf5"
    buffer.save_hdf5(str(path))
    assert detect_format(path) == "tianshou"
    restored = load_dataset(path)
    assert restored.stack_num == 4
    batch = restored[np.array([2, 6])]
    assert batch.obs.shape == (2, 4, 6, 6)
    # Stacks repeat an episode's first frame instead of reaching into the previous episode.
    np.testing.assert_array_equal(batch.obs[0, :, 0, 0], [0, 0, 1, 2])
    np.testing.assert_array_equal(batch.obs[1, :, 0, 0], [5, 5, 5, 6])


def test_format_is_detected_by_content_not_extension(tmp_path: Path) -> None:
    arrays = episodes_to_arrays([4], ["timeout"])
    d4rl_file = write_d4rl_file(tmp_path / "looks_like_a_buffer.buffer", **arrays)
    buffer_file = save_buffer(load_d4rl(d4rl_file), tmp_path / "looks_like_d4rl.hdf5")
    assert detect_format(d4rl_file) == "d4rl"
    assert detect_format(buffer_file) == "tianshou"
    np.testing.assert_array_equal(load_dataset(d4rl_file).obs, load_dataset(buffer_file).obs)
