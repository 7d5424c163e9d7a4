"""Atari screens recorded as RGB (Minari's `atari/*` datasets) turned into the 84×84 grayscale frames
discrete CQL learns from, the same way for the data and for the env it is evaluated on.

Minari's Atari datasets keep each step's raw 210×160 RGB screen, recorded on `ALE/<Game>-v5` with the
emulator skipping 4 frames itself (the screen is the 4th frame's, nothing max-pooled) and no sticky
actions. A frame here is that screen in ALE's own grayscale (OpenCV's RGB → gray weights reproduce
`ale.getScreenGrayscale()` exactly: every pixel of 1200 screens of four games, BENCHMARKS.md) shrunk to
84×84 with area interpolation, as gymnasium's `AtariPreprocessing` shrinks its frames. The evaluation env
is the recorded one under `AtariPreprocessing` taking one emulator step per env step, which makes the
same frame of the same screen, stacked with the first frame repeated at a game's start as the loaded
data's stacks are: training and evaluation see one kind of observation.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

SCREEN_SHAPE = (210, 160, 3)
FRAME_SIZE = 84


def is_screen_space(space: gym.Space) -> bool:
    """Whether `space` holds ALE's RGB screens."""
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and tuple(space.shape) == SCREEN_SHAPE


def screen_frames(screens: np.ndarray) -> np.ndarray:
    """(n, 210, 160, 3) uint8 RGB screens -> (n, 84, 84) uint8 grayscale frames."""
    import cv2

    frames = np.empty((len(screens), FRAME_SIZE, FRAME_SIZE), dtype=np.uint8)
    for frame, screen in zip(frames, screens, strict=True):
        gray = cv2.cvtColor(np.ascontiguousarray(screen), cv2.COLOR_RGB2GRAY)
        frame[:] = cv2.resize(gray, (FRAME_SIZE, FRAME_SIZE), interpolation=cv2.INTER_AREA)
    return frames


def make_screen_frames_env(spec: gym.envs.registration.EnvSpec, frames_stack: int, **kwargs: Any) -> gym.Env:
    """The env a screens dataset records (`spec`: its game, frame skip, sticky-action probability and
    frame cap), its screens made frames by gymnasium's `AtariPreprocessing` taking one emulator step per
    env step (no max-pooling, no no-ops: the recording had neither), `frames_stack` of them stacked,
    repeating the first at a start. Only gymnasium's own wrappers: an exported policy's env spec rebuilds
    this env without offline_rl. `tests/test_minari_atari.py` holds its frames to `screen_frames`'."""
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    from offline_rl.envs import make_env

    env = make_env(spec.id, spec=spec, **kwargs)
    if not is_screen_space(env.observation_space):
        env.close()
        raise ValueError(f"{spec.id} as recorded observes {env.observation_space}, not ALE's RGB screens")
    frames = AtariPreprocessing(env, noop_max=0, frame_skip=1, screen_size=FRAME_SIZE, terminal_on_life_loss=False)
    return FrameStackObservation(frames, frames_stack, padding_type="reset")
