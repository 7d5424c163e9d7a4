"""A frame-stacked Atari replay buffer that stores every 84×84 frame once.

`FrameStackObservation(4)` hands out stacks whose last three frames repeat the previous stack's, and
`obs_next` repeats `obs` shifted by one frame; storing stacks (and `obs_next`) costs 8× the frames.
Here each frame is stored once — an episode of T steps stores its T + 1 frames — and stacks are
rebuilt by fancy indexing at sample time, clamped at the episode's first frame, which is exactly
what `FrameStackObservation(padding_type="reset")` produced while collecting. 1M transitions cost
the 7.06 GB of their frames plus 30 bytes per step of bookkeeping.

The buffer is a Tianshou `ReplayBuffer`: `buf[indices]` yields `obs` and `obs_next` as
(batch, stack, 84, 84) uint8 arrays with `act`, `rew`, `terminated`, `truncated`, `done`;
`buf.next`, `buf.prev` and `buf.sample_indices` work as Tianshou's do; `save_hdf5` / `load_buffer`
round-trip it (optionally compressed).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import numpy as np
from tianshou.data import Batch, ReplayBuffer

from offline_rl.core.compat import (
    batch_of_arrays,
    buffer_columns,
    mark_buffer_full,
    read_buffer_hdf5,
    set_buffer_attribute,
)
from offline_rl.data.sampling import as_indices, gather_frames

FRAME_STACK_MARKER = "offline_rl_frame_stack_v1"
"""Name of the attribute (an HDF5 dataset once saved) that identifies this buffer's files."""


@functools.cache
def _window_offsets(length: int) -> np.ndarray:
    offsets = np.arange(-length + 1, 1)
    offsets.setflags(write=False)
    return offsets


class FrameStackBuffer(ReplayBuffer):
    """Transitions over frames stored once; see the module docstring.

    Build one with `FrameStackBufferBuilder`, or load one with `offline_rl.data.load_buffer`.
    """

    def __init__(
        self,
        frames: np.ndarray,
        frame_index: np.ndarray,
        episode_first_frame: np.ndarray,
        act: np.ndarray,
        rew: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        stack_num: int = 4,
    ) -> None:
        size = len(act)
        super().__init__(size)
        self.options["stack_num"] = stack_num
        self.frames = frames
        self.frame_index = frame_index.astype(np.int64, copy=False)
        self.episode_first_frame = episode_first_frame.astype(np.int64, copy=False)
        self.frame_stack = int(stack_num)
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool)
        self.set_batch(
            Batch(
                act=act,
                rew=np.asarray(rew, dtype=np.float32),
                terminated=terminated,
                truncated=truncated,
                done=terminated | truncated,
            )  # type: ignore[arg-type]
        )
        mark_buffer_full(self, size)
        set_buffer_attribute(self, FRAME_STACK_MARKER, np.array([1], dtype=np.int8))

    def stacks(self, newest_frames: np.ndarray, first_frames: np.ndarray, length: int | None = None) -> np.ndarray:
        """(len, length, H, W) frame windows ending at `newest_frames` (default length: the stack size),
        clamped at each episode's first frame."""
        offsets = _window_offsets(length or self.frame_stack)
        index = newest_frames[:, None] + offsets
        np.maximum(index, first_frames[:, None], out=index)
        return gather_frames(self.frames, index)

    def __getitem__(self, index: Any) -> Batch:
        indices, scalar = as_indices(index, len(self))
        newest = self.frame_index[indices]
        first = self.episode_first_frame[indices]
        # obs and obs_next share all but one frame: gather the stack + 1 frame window once.
        window = self.stacks(newest + 1, first, length=self.frame_stack + 1)
        meta = buffer_columns(self)
        batch = batch_of_arrays(
            obs=window[:, :-1],
            act=meta.act[indices],
            rew=meta.rew[indices],
            terminated=meta.terminated[indices],
            truncated=meta.truncated[indices],
            done=meta.done[indices],
            obs_next=window[:, 1:],
            info=Batch(),
            policy=Batch(),
        )
        return batch[0] if scalar else batch  # type: ignore[return-value]

    @classmethod
    def load_hdf5(cls, path: str, device: str | None = None) -> FrameStackBuffer:
        """Tianshou's loader with each array read once: its own copies the frames a second time under
        numpy 1.x or h5py < 3.12 (`compat.read_buffer_hdf5`)."""
        return read_buffer_hdf5(cls, path)  # type: ignore[return-value]

    @property
    def nbytes(self) -> int:
        """Bytes held in RAM by the frames and the per-step arrays."""
        arrays = [self.frames, self.frame_index, self.episode_first_frame]
        arrays += [buffer_columns(self)[key] for key in ("act", "rew", "terminated", "truncated", "done")]
        return int(sum(np.asarray(a).nbytes for a in arrays))


class FrameStackBufferBuilder:
    """Accumulates transitions from a `FrameStackObservation` env into a `FrameStackBuffer`.

    Call `add(obs, act, rew, terminated, truncated, obs_next)` with the stacks the env returned;
    only the newest frame of `obs_next` (and, at an episode's first step, of `obs`) is kept. Frames
    go into a preallocated array when the capacity is known (`max_frames`), so collecting 1M steps
    never holds a second copy.
    """

    def __init__(self, frame_shape: tuple[int, int] = (84, 84), stack_num: int = 4, max_frames: int = 1024) -> None:
        self.frame_shape, self.stack_num = frame_shape, stack_num
        self._frames = np.empty((max_frames, *frame_shape), dtype=np.uint8)
        self._num_frames = 0
        self._frame_index: list[int] = []
        self._first: list[int] = []
        self._act: list[Any] = []
        self._rew: list[float] = []
        self._terminated: list[bool] = []
        self._truncated: list[bool] = []
        self._episode_first: int | None = None

    def _push_frames(self, frames: np.ndarray) -> int:
        """Store `frames` (n, 84, 84) after the others; the number of the last one."""
        needed = self._num_frames + len(frames)
        if needed > len(self._frames):
            grown = np.empty((max(2 * len(self._frames), needed), *self.frame_shape), dtype=np.uint8)
            grown[: self._num_frames] = self._frames[: self._num_frames]
            self._frames = grown
        self._frames[self._num_frames : needed] = frames
        self._num_frames = needed
        return needed - 1

    def _push_frame(self, frame: np.ndarray) -> int:
        return self._push_frames(np.asarray(frame)[None])

    def add(
        self, obs: np.ndarray, act: Any, rew: float, terminated: bool, truncated: bool, obs_next: np.ndarray
    ) -> None:
        if self._episode_first is None:
            self._episode_first = self._push_frame(np.asarray(obs)[-1])
            current = self._episode_first
        else:
            current = self._num_frames - 1
        self._frame_index.append(current)
        self._first.append(self._episode_first)
        self._push_frame(np.asarray(obs_next)[-1])
        self._act.append(act)
        self._rew.append(float(rew))
        self._terminated.append(bool(terminated))
        self._truncated.append(bool(truncated))
        if terminated or truncated:
            self._episode_first = None

    def __len__(self) -> int:
        return len(self._act)

    # What a collection journal (`offline_rl.runs.collection_journal`) keeps on disk and reads back.

    def position(self) -> tuple[int, int]:
        """Where the builder stands: (transitions, frames) added so far."""
        return len(self._act), self._num_frames

    def rows_since(self, position: tuple[int, int]) -> dict[str, np.ndarray]:
        """The transitions and frames added after `position`; their frame numbers count from this
        builder's first frame, so `extend` on a builder holding exactly the earlier rows restores them."""
        steps, frames = position
        return {
            "frame_start": np.array(frames, dtype=np.int64),
            "frames": self._frames[frames : self._num_frames],
            "frame_index": np.array(self._frame_index[steps:], dtype=np.int64),
            "episode_first_frame": np.array(self._first[steps:], dtype=np.int64),
            "act": np.array(self._act[steps:], dtype=np.int64),
            "rew": np.array(self._rew[steps:], dtype=np.float32),
            "terminated": np.array(self._terminated[steps:], dtype=bool),
            "truncated": np.array(self._truncated[steps:], dtype=bool),
        }

    def extend(self, rows: dict[str, np.ndarray]) -> None:
        """Append what `rows_since` returned (read back from a journal), in the order it was written."""
        if int(rows["frame_start"]) != self._num_frames:
            start = int(rows["frame_start"])
            raise ValueError(f"rows start at frame {start}, but the builder holds {self._num_frames}")
        self._push_frames(rows["frames"])
        self._frame_index += rows["frame_index"].tolist()
        self._first += rows["episode_first_frame"].tolist()
        self._act += rows["act"].tolist()
        self._rew += rows["rew"].tolist()
        self._terminated += rows["terminated"].tolist()
        self._truncated += rows["truncated"].tolist()
        running = bool(self._act) and not (self._terminated[-1] or self._truncated[-1])
        self._episode_first = self._first[-1] if running else None

    def close_running_episode(self) -> None:
        """End the episode being recorded here, as truncated: its env will not continue it."""
        if self._act and not (self._terminated[-1] or self._truncated[-1]):
            self._truncated[-1] = True
        self._episode_first = None

    def build(self) -> FrameStackBuffer:
        """The buffer so far; an episode still running is closed as truncated (the data stops)."""
        if not self._act:
            raise ValueError("no transitions were added")
        terminated = np.array(self._terminated, dtype=bool)
        truncated = np.array(self._truncated, dtype=bool)
        if not (terminated[-1] or truncated[-1]):
            truncated[-1] = True
        return FrameStackBuffer(
            frames=self._frames[: self._num_frames],
            frame_index=np.array(self._frame_index, dtype=np.int64),
            episode_first_frame=np.array(self._first, dtype=np.int64),
            act=np.array(self._act),
            rew=np.array(self._rew, dtype=np.float32),
            terminated=terminated,
            truncated=truncated,
            stack_num=self.stack_num,
        )


def merge_frame_stack_buffers(parts: Iterable[FrameStackBuffer], total_frames: int | None = None) -> FrameStackBuffer:
    """One buffer holding the transitions of several (one per parallel env, or per file), episodes intact.

    Each part's frames are copied into one preallocated array as the part arrives. Given
    `total_frames` and a generator that keeps no reference to the parts it yields (one that loads a
    file, or empties a recorder), memory peaks at the result plus one part rather than twice the
    result: 1M Atari transitions are 7 GB of frames.
    """
    if total_frames is None:
        parts = list(parts)
        total_frames = sum(len(part.frames) for part in parts)
    frames: np.ndarray | None = None
    filled, stack_num = 0, 4
    columns: dict[str, list[np.ndarray]] = {}
    for part in parts:
        if frames is None:
            frames = np.empty((total_frames, *part.frames.shape[1:]), dtype=part.frames.dtype)
            stack_num = part.frame_stack
        if filled + len(part.frames) > total_frames:
            raise ValueError(f"the parts hold more than the {total_frames} frames announced")
        frames[filled : filled + len(part.frames)] = part.frames
        meta = buffer_columns(part)
        for key, values in (
            ("frame_index", part.frame_index + filled),
            ("episode_first_frame", part.episode_first_frame + filled),
            ("act", meta.act),
            ("rew", meta.rew),
            ("terminated", meta.terminated),
            ("truncated", meta.truncated),
        ):
            columns.setdefault(key, []).append(np.asarray(values))
        filled += len(part.frames)
        del part, meta  # the part's frames can go before the next part arrives
    if frames is None:
        raise ValueError("nothing to merge")
    joined = {key: np.concatenate(values) for key, values in columns.items()}
    return FrameStackBuffer(frames=frames[:filled], stack_num=stack_num, **joined)
