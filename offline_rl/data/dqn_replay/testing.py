"""Dopamine replay checkpoints written as Dopamine writes them, for tests and benchmarks.

`DopamineReplay` behaves as Dopamine's `OutOfGraphReplayBuffer` does where its files are concerned:
a circular store of single frames, `stack - 1` zero slots added before each episode (and at the
start), `add_count` counting them all, and `save` writing each array with `np.save` inside a
`gzip.GzipFile` under Dopamine's file names. Unwritten slots hold noise (Dopamine's store is
`np.empty`), so a reader that strays into them is caught.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from offline_rl.data.dqn_replay.slots import STACK
from offline_rl.data.dqn_replay.sources import array_file


class DopamineReplay:
    def __init__(self, capacity: int, frame_shape: tuple[int, int] = (84, 84), stack: int = STACK) -> None:
        noise = np.random.default_rng(12345)
        self.capacity, self.stack = capacity, stack
        self.store = {
            "observation": noise.integers(1, 255, (capacity, *frame_shape), dtype=np.uint8),
            "action": noise.integers(100, 200, capacity, dtype=np.int32),
            "reward": noise.normal(size=capacity).astype(np.float32) + 50.0,
            "terminal": np.full(capacity, 7, dtype=np.uint8),
        }
        self.add_count = np.array(0)

    def cursor(self) -> int:
        return int(self.add_count) % self.capacity

    def add(self, frame: np.ndarray, action: int, reward: float, terminal: bool) -> None:
        """One step; an episode's first step is preceded by the zero slots Dopamine pads with."""
        if int(self.add_count) == 0 or self.store["terminal"][self.cursor() - 1] == 1:
            for _ in range(self.stack - 1):
                self._put(np.zeros_like(frame), 0, 0.0, False)
        self._put(frame, action, reward, terminal)

    def _put(self, frame: np.ndarray, action: int, reward: float, terminal: bool) -> None:
        cursor = self.cursor()
        self.store["observation"][cursor] = frame
        self.store["action"][cursor] = action
        self.store["reward"][cursor] = reward
        self.store["terminal"][cursor] = int(terminal)
        self.add_count += 1

    def invalid_range(self) -> np.ndarray:
        return np.array([(self.cursor() - 1 + i) % self.capacity for i in range(self.stack + 1)])

    def save(self, folder: Path, checkpoint: int) -> None:
        """The checkpoint's files, each a gzip-compressed `.npy` as Dopamine's `save` writes them."""
        folder.mkdir(parents=True, exist_ok=True)
        arrays = {**self.store, "add_count": self.add_count, "invalid_range": self.invalid_range()}
        for name, array in arrays.items():
            path = folder / array_file(name, checkpoint)
            with open(path, "wb") as file, gzip.GzipFile(fileobj=file, mode="wb") as out:
                np.save(out, array, allow_pickle=False)


def step_frame(episode: int, step: int, frame_shape: tuple[int, int] = (84, 84)) -> np.ndarray:
    """A frame that says which episode and step it is (never black, so padding stays recognisable)."""
    frame = np.full(frame_shape, 1 + episode % 250, dtype=np.uint8)
    frame[0, 0], frame[0, 1] = 1 + step % 250, 1 + step // 250
    return frame
