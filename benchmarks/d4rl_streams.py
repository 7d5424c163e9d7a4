"""The random streams D4RL's reference scripts drew from, for replaying them on the envs rebuilt here.

D4RL measured its reference returns (`scripts/reference_scores/*.py`) under gym < 0.22, seeding
everything with 0: `env.seed(0)` for the env's resets and `env.action_space.seed(0)` for random
actions, both through `gym.utils.seeding.np_random`, which hashed the seed with SHA-512 and seeded a
legacy `RandomState` with the digest's first 8 bytes. Legacy `RandomState` streams are stable across
numpy versions, so the same draws come out here: the same starts and the same actions, episode for
episode, which makes D4RL's figures comparable exactly rather than within a 100-episode spread.
"""

from __future__ import annotations

import hashlib
import struct

import gymnasium as gym
import numpy as np


def legacy_gym_random_state(seed: int) -> np.random.RandomState:
    """What `gym.utils.seeding.np_random(seed)` returned before gym 0.22: a legacy RandomState seeded
    with the first 8 bytes of SHA-512(str(seed)), read as little-endian 32-bit words."""
    digest = hashlib.sha512(str(seed % 2**64).encode("utf8")).digest()[:8]
    words = list(struct.unpack("<2I", digest))
    while len(words) > 1 and words[-1] == 0:  # gym's bigint-to-words conversion drops leading zeros
        words.pop()
    state = np.random.RandomState()
    state.seed(words)
    return state


def uniform_actions(state: np.random.RandomState, space: gym.spaces.Box) -> np.ndarray:
    """gym < 0.22 `Box.sample()` of a bounded float box: one uniform draw per dimension, as float32."""
    return state.uniform(low=space.low, high=space.high, size=space.low.shape).astype(space.dtype)
