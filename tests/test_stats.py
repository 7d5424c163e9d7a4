"""Dataset statistics against hand-computed values."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from conftest import write_d4rl_file
from offline_rl.data import dataset_stats, load_d4rl


def test_stats_match_hand_computed_values(tmp_path: Path) -> None:
    obs = np.array([[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]], dtype=np.float32)
    path = write_d4rl_file(
        tmp_path / "tiny.hdf5",
        observations=obs,
        actions=np.zeros((5, 1), np.float32),
        rewards=np.array([1, 2, 3, 10, -4], np.float32),
        terminals=np.array([0, 1, 0, 0, 0], bool),
        timeouts=np.array([0, 0, 0, 1, 0], bool),
        next_observations=obs + 1,
    )
    stats = dataset_stats(load_d4rl(path))
    # episodes: [1, 2] terminated, [3, 10] timed out, [-4] cut by the end of the data.
    assert stats.transitions == 5
    assert stats.episodes == 3
    assert stats.return_mean == (3 + 13 - 4) / 3
    assert (stats.return_min, stats.return_max) == (-4, 13)
    assert stats.terminated == 1
    assert stats.truncated == 2
    np.testing.assert_allclose(stats.obs_mean, [4, 5])
    np.testing.assert_allclose(stats.obs_std, np.std([0, 2, 4, 6, 8]) * np.ones(2))
    assert "episodes: 3" in stats.summary()
