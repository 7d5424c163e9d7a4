"""Minari's Atari datasets (`atari/breakout/expert-v0`, ...) as frame-stacked buffers for discrete CQL.

Their observations are raw 210×160 RGB screens (100 KB a step); `load_minari` would hold them as they
are, twice (obs and obs_next). Here each episode's T + 1 screens become T + 1 frames of 84×84 grayscale
(`offline_rl.envs.atari`, 7 KB each) as the episode is read, in a `FrameStackBuffer` that stores every
frame once and stacks them at sample time, repeating an episode's first frame at its start: what the
evaluation env built by `atari_screens.make_screen_frames_env` hands out. Terminations and truncations
are kept as recorded; the dataset's env spec is kept for the evaluation.
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np

from offline_rl.core.errors import DatasetError
from offline_rl.data.frame_stack import FrameStackBuffer
from offline_rl.data.minari import StepColumns, episodes_of, minari_info, open_minari
from offline_rl.data.transitions import set_dataset_info
from offline_rl.envs.atari import FRAME_SIZE, is_screen_space, screen_frames

SCREENS_NOTE = "ALE's RGB screens, converted to 84×84 grayscale frames"


def holds_atari_screens(dataset: Any) -> bool:
    """Whether an opened Minari dataset records ALE's RGB screens with discrete actions."""

    return is_screen_space(dataset.observation_space) and isinstance(dataset.action_space, gym.spaces.Discrete)


def minari_records_screens(source: str | os.PathLike[str]) -> bool:
    """Whether a Minari dataset (id or directory; fetched if it is not local) records ALE's screens."""
    return holds_atari_screens(open_minari(source, download=True))


def load_minari_atari(
    source: str | os.PathLike[str], *, stack_num: int = 4, download: bool = False
) -> FrameStackBuffer:
    """A Minari dataset of Atari screens (id or directory) as a `FrameStackBuffer` of `stack_num` frames."""
    dataset = open_minari(source, download=download)
    label = f"Minari dataset '{dataset.spec.dataset_id}'"
    if not holds_atari_screens(dataset):
        raise DatasetError(
            f"{label}: observes {dataset.observation_space} with {dataset.action_space} actions; expected ALE's "
            "RGB screens, Box(0, 255, (210, 160, 3), uint8), and discrete actions"
        )
    total_steps, total_frames = int(dataset.total_steps), int(dataset.total_steps) + int(dataset.total_episodes)
    frames = np.empty((total_frames, FRAME_SIZE, FRAME_SIZE), dtype=np.uint8)
    frame_index = np.empty(total_steps, dtype=np.int64)
    first_frame = np.empty(total_steps, dtype=np.int64)
    columns = StepColumns.empty(total_steps, np.dtype(np.int64), ())
    steps_done = frames_done = 0
    for episode in episodes_of(dataset, "load minari (screens to frames)"):
        if len(episode.rewards) == 0:
            continue
        screens = np.asarray(episode.observations)
        end = columns.add(steps_done, episode, len(screens), label)
        frames[frames_done : frames_done + len(screens)] = screen_frames(screens)
        frame_index[steps_done:end] = frames_done + np.arange(end - steps_done)
        first_frame[steps_done:end] = frames_done
        steps_done, frames_done = end, frames_done + len(screens)
    if steps_done == 0:
        raise DatasetError(f"{label} holds no transitions")
    buffer = FrameStackBuffer(
        frames=frames[:frames_done],
        frame_index=frame_index[:steps_done],
        episode_first_frame=first_frame[:steps_done],
        act=columns.act[:steps_done],
        rew=columns.rew[:steps_done],
        terminated=columns.terminated[:steps_done],
        truncated=columns.truncated[:steps_done],
        stack_num=stack_num,
    )
    set_dataset_info(buffer, {**minari_info(dataset, source), "observations": SCREENS_NOTE, "atari_screens": True})
    return buffer
