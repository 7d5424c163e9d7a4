"""A replay buffer whose observations are stacks of frames drawn from a pool of distinct frames.

RL Unplugged stores every transition as 8 PNG frames (`o_t` and `o_tp1`, 4 each), but `o_tp1` is
`o_t` shifted by one frame and consecutive transitions of an episode share 3 of their 4 frames, so a
shard of N transitions holds only about N distinct frames. Here each distinct frame is stored once in
`frames` and every transition keeps the pool indices of its two stacks: 1M transitions cost their
distinct frames (7 KB each) plus 32 bytes of indices, against 56 KB for `obs` + `obs_next` arrays.
Nothing is assumed about which frames repeat, so any stack the source holds is reproduced exactly.

The buffer is a Tianshou `ReplayBuffer`: `buf[indices]` yields `obs` and `obs_next` as
(batch, 4, 84, 84) uint8 stacks with `act`, `rew`, `terminated`, `truncated`, `done` and any extra
per-transition keys; `buf.next`/`buf.prev` follow Tianshou's rules (an episode ends where `done`).

File layout (HDF5; `_meta` group and `maxsize` attribute as Tianshou's `save_hdf5` writes them, so
the file is recognised as a buffer): `frames` (F, H, W) uint8, `obs_frames` and `obs_next_frames`
(N, stack) int32, `_meta/<key>` per-transition arrays, and a marker dataset `offline_rl_frame_pool_v1`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import h5py
import numpy as np
from tianshou.data import Batch, ReplayBuffer

from offline_rl.core.compat import (
    batch_of_arrays,
    buffer_columns,
    mark_buffer_full,
    set_buffer_columns,
)
from offline_rl.data.sampling import as_indices, gather_frames
from offline_rl.data.transitions import combined_info, set_dataset_info

FRAME_POOL_MARKER = "offline_rl_frame_pool_v1"
POOL_KEYS = ("frames", "obs_frames", "obs_next_frames")
REQUIRED_META_KEYS = ("act", "rew", "terminated", "truncated", "done")


class FramePoolBuffer(ReplayBuffer):
    """Transitions whose stacks index a pool of frames stored once; see the module docstring."""

    def __init__(
        self,
        frames: np.ndarray,
        obs_frames: np.ndarray,
        obs_next_frames: np.ndarray,
        act: np.ndarray,
        rew: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        extra: dict[str, np.ndarray] | None = None,
    ) -> None:
        size = len(act)
        if not (len(obs_frames) == len(obs_next_frames) == len(rew) == len(terminated) == len(truncated) == size):
            raise ValueError("per-transition arrays differ in length")
        super().__init__(size)
        self.frames = frames
        self.obs_frames = np.asarray(obs_frames, dtype=np.int32)
        self.obs_next_frames = np.asarray(obs_next_frames, dtype=np.int32)
        self.options["stack_num"] = int(self.obs_frames.shape[1])
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool)
        columns: dict[str, Any] = {
            "act": np.asarray(act),
            "rew": np.asarray(rew, dtype=np.float32),
            "terminated": terminated,
            "truncated": truncated,
            "done": terminated | truncated,
        }
        for key, values in (extra or {}).items():
            columns[key] = np.asarray(values)
        self.extra_keys = tuple((extra or {}).keys())
        set_buffer_columns(self, Batch(columns))
        mark_buffer_full(self, size)

    def __getitem__(self, index: Any) -> Batch:
        indices, scalar = as_indices(index, len(self))
        meta = buffer_columns(self)
        stack = self.obs_frames.shape[1]
        # One copy for both stacks (the copy is the cost of sampling); obs and obs_next are views of it.
        both = gather_frames(self.frames, np.hstack([self.obs_frames[indices], self.obs_next_frames[indices]]))
        batch = batch_of_arrays(
            obs=both[:, :stack],
            act=meta.act[indices],
            rew=meta.rew[indices],
            terminated=meta.terminated[indices],
            truncated=meta.truncated[indices],
            done=meta.done[indices],
            obs_next=both[:, stack:],
            info=Batch(),
            policy=Batch(),
            **{key: meta[key][indices] for key in self.extra_keys},
        )
        return batch[0] if scalar else batch  # type: ignore[return-value]

    @property
    def nbytes(self) -> int:
        """Bytes held in RAM by the frame pool, the indices and the per-transition arrays."""
        arrays = [self.frames, self.obs_frames, self.obs_next_frames]
        arrays += [buffer_columns(self)[key] for key in (*REQUIRED_META_KEYS, *self.extra_keys)]
        return int(sum(np.asarray(a).nbytes for a in arrays))

    def save_hdf5(self, path: str, compression: str | None = None) -> None:
        with h5py.File(path, "w") as file:
            self.write_hdf5(file, compression=compression)

    def write_hdf5(self, file: h5py.File, compression: str | None = None) -> None:
        """The buffer into an HDF5 file open for writing (`save_buffer` opens it atomically)."""
        file.create_dataset("frames", data=self.frames, compression=compression)
        columns = {key: buffer_columns(self)[key] for key in (*REQUIRED_META_KEYS, *self.extra_keys)}
        write_pool_transitions(file, self.obs_frames, self.obs_next_frames, columns)

    @classmethod
    def load_hdf5(cls, path: str, device: str | None = None) -> FramePoolBuffer:
        return cls.load_many([path])

    @classmethod
    def load_many(
        cls, paths: Sequence[str | os.PathLike[str]], transitions: list[int] | None = None
    ) -> FramePoolBuffer:
        """One buffer holding the transitions of several files (e.g. several RL Unplugged shards).

        Frames are read straight into one preallocated pool, so memory peaks at the result's size,
        not twice it; each file's episodes stay intact. Extra keys are kept where every file has them.
        Each file's transition count is appended to `transitions`, when given.
        """
        files = [h5py.File(path, "r") for path in paths]
        try:
            sizes = [file["frames"].shape[0] for file in files]
            frames = np.empty((sum(sizes), *files[0]["frames"].shape[1:]), dtype=np.uint8)
            offsets = np.cumsum([0, *sizes[:-1]])
            extra_keys = set.intersection(*(set(file["_meta"]) for file in files)) - set(REQUIRED_META_KEYS)
            columns: dict[str, list[np.ndarray]] = {}
            for file, offset, size in zip(files, offsets, sizes, strict=True):
                if size:
                    file["frames"].read_direct(frames, dest_sel=np.s_[offset : offset + size])
                columns.setdefault("obs_frames", []).append(file["obs_frames"][()] + offset)
                if transitions is not None:
                    transitions.append(len(columns["obs_frames"][-1]))
                columns.setdefault("obs_next_frames", []).append(file["obs_next_frames"][()] + offset)
                for key in (*REQUIRED_META_KEYS, *sorted(extra_keys)):
                    columns.setdefault(key, []).append(file["_meta"][key][()])
            joined = {key: np.concatenate(parts) for key, parts in columns.items()}
            infos = [{key: _plain(value) for key, value in f.attrs.items() if key != "maxsize"} for f in files]
        finally:
            for file in files:
                file.close()
        buffer = cls(
            frames=frames,
            obs_frames=joined.pop("obs_frames"),
            obs_next_frames=joined.pop("obs_next_frames"),
            act=joined.pop("act"),
            rew=joined.pop("rew"),
            terminated=joined.pop("terminated"),
            truncated=joined.pop("truncated"),
            extra={key: values for key, values in joined.items() if key != "done"},
        )
        info = combined_info(infos)
        if info:
            set_dataset_info(buffer, info)
        return buffer


def write_pool_transitions(
    file: h5py.File,
    obs_frames: np.ndarray,
    obs_next_frames: np.ndarray,
    columns: dict[str, np.ndarray],
) -> None:
    """Everything but `frames` (which a streaming writer fills itself), in the layout `load_hdf5` reads."""
    missing = [key for key in REQUIRED_META_KEYS if key not in columns]
    if missing:
        raise ValueError(f"per-transition columns missing: {missing}")
    file.create_dataset("obs_frames", data=np.asarray(obs_frames, dtype=np.int32))
    file.create_dataset("obs_next_frames", data=np.asarray(obs_next_frames, dtype=np.int32))
    meta = file.create_group("_meta")
    for key, values in columns.items():
        meta.create_dataset(key, data=np.asarray(values))
    file.create_dataset(FRAME_POOL_MARKER, data=np.array([1], dtype=np.int8))
    file.attrs["maxsize"] = len(obs_frames)


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.generic):
        return value.item()
    return value
