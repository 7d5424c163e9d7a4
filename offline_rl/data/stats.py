"""Summary statistics of an offline dataset: the numbers a researcher checks before training."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tianshou.data import ReplayBuffer

from offline_rl.core.errors import DatasetError

_OBS_SAMPLE_FOR_IMAGES = 10_000


@dataclass(frozen=True)
class DatasetStats:
    """Counts, episode returns and observation moments of a replay buffer.

    `terminated` counts steps that end an episode by termination; `truncated` counts steps that end
    one by truncation only (time-out or end of data).
    """

    transitions: int
    episodes: int
    return_mean: float
    return_min: float
    return_max: float
    length_mean: float
    terminated: int
    truncated: int
    obs_mean: np.ndarray
    obs_std: np.ndarray

    def summary(self) -> str:
        """Multi-line human-readable summary, as the converters print it."""
        mean = np.array2string(self.obs_mean, precision=3, max_line_width=100, threshold=12)
        std = np.array2string(self.obs_std, precision=3, max_line_width=100, threshold=12)
        return "\n".join(
            [
                f"transitions: {self.transitions}",
                f"episodes: {self.episodes} (mean length {self.length_mean:.1f})",
                f"returns: mean {self.return_mean:.3f}, min {self.return_min:.3f}, max {self.return_max:.3f}",
                f"episode ends: {self.terminated} terminated, {self.truncated} truncated",
                f"obs mean: {mean}",
                f"obs std: {std}",
            ]
        )


def dataset_stats(buffer: ReplayBuffer) -> DatasetStats:
    """Compute `DatasetStats` in chronological order (a wrapped circular buffer is unrolled)."""
    size = len(buffer)
    if size == 0:
        raise ValueError("dataset_stats needs a non-empty buffer")
    order = buffer.sample_indices(0)
    rew = np.asarray(buffer.rew[order], dtype=np.float64)
    terminated = np.asarray(buffer.terminated[order], dtype=bool)
    truncated = np.asarray(buffer.truncated[order], dtype=bool)
    ends = terminated | truncated
    ends[-1] = True  # data that stops mid-episode still closes that episode
    returns, starts = episode_returns(rew, ends)
    lengths = np.diff(np.append(starts, size))
    frames = buffer.__dict__.get("frames")
    observations = frames[:, None] if frames is not None else np.asarray(buffer.obs[:size])
    obs_mean, obs_std = _obs_moments(observations)
    return DatasetStats(
        transitions=size,
        episodes=len(starts),
        return_mean=float(returns.mean()),
        return_min=float(returns.min()),
        return_max=float(returns.max()),
        length_mean=float(lengths.mean()),
        terminated=int(terminated.sum()),
        truncated=int((truncated & ~terminated).sum()),
        obs_mean=obs_mean,
        obs_std=obs_std,
    )


def episode_returns(rew: np.ndarray, episode_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(return, first row) of each episode of chronologically ordered rows; `episode_end` marks each
    episode's last row (the last row must be one)."""
    starts = np.concatenate([[0], np.flatnonzero(episode_end[:-1]) + 1]).astype(np.int64)
    return np.add.reduceat(np.asarray(rew, dtype=np.float64), starts), starts


def finished_episode_returns(rew: np.ndarray, episode_end: np.ndarray, finished: np.ndarray) -> np.ndarray:
    """Returns of the episodes that finished (`finished[row]` at their last row): an episode cut
    off by the end of the data, or still running in a buffer, has a return cut short."""
    if len(rew) == 0:
        return np.empty(0, dtype=np.float64)
    ends = np.asarray(episode_end, dtype=bool).copy()
    ends[-1] = True
    returns, starts = episode_returns(rew, ends)
    last_rows = np.append(starts[1:], len(rew)) - 1
    return returns[np.asarray(finished, dtype=bool)[last_rows]]


CORL_EPISODE_STEPS = 1000


def corl_reward_unit(rew: np.ndarray, episode_end: np.ndarray, finished: np.ndarray) -> float:
    """CORL's `normalize_reward` factor for MuJoCo locomotion: 1000 / (max − min return) over the
    finished episodes (as CORL's `return_reward_range`), so the data's return range spans 1000
    reward units whatever the dataset's quality."""
    complete = finished_episode_returns(rew, episode_end, finished)
    if len(complete) == 0 or float(complete.max() - complete.min()) <= 0.0:
        raise DatasetError(
            "--normalize-reward needs at least two finished episodes with different returns "
            f"(found {len(complete)} finished episode(s))"
        )
    return CORL_EPISODE_STEPS / float(complete.max() - complete.min())


def _obs_moments(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-dimension moments of vector observations; scalar moments of a sample of image ones."""
    if obs.ndim <= 2:
        flat = obs.reshape(len(obs), -1)
        return flat.mean(axis=0, dtype=np.float64), flat.std(axis=0, dtype=np.float64)
    stride = max(1, len(obs) // _OBS_SAMPLE_FOR_IMAGES)
    sample = obs[::stride].astype(np.float64)
    return np.array([sample.mean()]), np.array([sample.std()])
