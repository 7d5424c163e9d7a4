"""Convert one RL Unplugged Atari shard into a `FramePoolBuffer` file, streaming, in bounded memory.

Records are read, checked and split into frames as they come; new distinct frames go straight to
the output's resizable `frames` dataset in blocks, and only the small per-transition columns (about
60 bytes each) stay in memory until the end, when the transitions are put in episode order and
written. The file is built under a temporary name and renamed when complete, so an interrupted or
failed conversion never leaves anything at the output path.
"""

from __future__ import annotations

import os
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from offline_rl.core.errors import DatasetError
from offline_rl.core.files import atomic_hdf5
from offline_rl.data.frame_padding import DOPAMINE_PADDING
from offline_rl.data.frame_pool import write_pool_transitions
from offline_rl.data.rl_unplugged.chains import episode_order, successors
from offline_rl.data.rl_unplugged.frames import FRAME_SHAPE, FrameError, FramePool
from offline_rl.data.rl_unplugged.records import STACK, RecordError, parse_transition
from offline_rl.data.rl_unplugged.sources import recorded_task
from offline_rl.data.rl_unplugged.tfrecord import read_records

_FRAME_NAMES = tuple(f"o_t[{i}]" for i in range(STACK)) + tuple(f"o_tp1[{i}]" for i in range(STACK))
_FRAMES_PER_CHUNK = 256  # HDF5 chunk: 1.8 MB of frames


class ShardError(DatasetError):
    """A shard that cannot be converted; the message names the shard and the record."""


@dataclass(frozen=True)
class ShardSummary:
    shard: Path
    output: Path
    transitions: int
    episodes: int
    terminals: int
    skipped: int
    frames: int
    bytes_per_transition: float
    seconds: float
    note: str = ""

    @property
    def transitions_per_second(self) -> float:
        return self.transitions / self.seconds if self.seconds > 0 else float("inf")

    def line(self) -> str:
        text = (
            f"{self.shard.name}: {self.transitions} transitions, {self.episodes} episodes, "
            f"{self.terminals} terminals, {self.skipped} corrupt records skipped, "
            f"{self.bytes_per_transition / 1024:.1f} KB/transition in RAM, {self.seconds:.1f} s, "
            f"{self.transitions_per_second:.0f} transitions/s -> {self.output}"
        )
        return f"{text} ({self.note})" if self.note else text


class _Columns:
    """Per-transition values in compact typed arrays while the shard streams by."""

    def __init__(self) -> None:
        self.obs_frames = array("i")
        self.obs_next_frames = array("i")
        self.act = array("q")
        self.act_next = array("q")
        self.rew = array("f")
        self.discount = array("f")
        self.episode_id = array("Q")
        self.episode_return = array("f")

    def __len__(self) -> int:
        return len(self.act)


def convert_shard(
    shard: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    skip_corrupt: bool = False,
    compression: str | None = None,
    on_bytes_read: Callable[[int], None] | None = None,
) -> ShardSummary:
    """Convert `shard` (gzip TFRecord of RL Unplugged Atari transitions) to a buffer file at `output`."""
    shard_path, output_path = Path(shard).expanduser(), Path(output).expanduser()
    if not shard_path.is_file():
        raise ShardError(f"{shard_path}: no such file")
    started = time.perf_counter()
    with atomic_hdf5(output_path) as file:
        frames = file.create_dataset(
            "frames",
            shape=(0, *FRAME_SHAPE),
            maxshape=(None, *FRAME_SHAPE),
            chunks=(_FRAMES_PER_CHUNK, *FRAME_SHAPE),
            dtype=np.uint8,
            compression=compression,
        )

        def append_frames(block: np.ndarray) -> None:
            start = frames.shape[0]
            frames.resize(start + len(block), axis=0)
            frames[start:] = block

        pool = FramePool(append_frames)
        columns, skipped, note = _read_shard(shard_path, pool, skip_corrupt, on_bytes_read)
        pool.flush()
        if not len(columns):
            raise ShardError(f"{shard_path}: holds no readable transition")
        terminated = np.frombuffer(columns.discount, dtype=np.float32) == 0.0
        episode_ids = np.frombuffer(columns.episode_id, dtype=np.uint64)
        obs_frames = np.frombuffer(columns.obs_frames, dtype=np.int32).reshape(-1, STACK)
        obs_next_frames = np.frombuffer(columns.obs_next_frames, dtype=np.int32).reshape(-1, STACK)
        order, ends = episode_order(successors(episode_ids, obs_frames, obs_next_frames, terminated))
        terminated = terminated[order]
        transition_columns = {
            "act": np.frombuffer(columns.act, dtype=np.int64)[order],
            "rew": np.frombuffer(columns.rew, dtype=np.float32)[order],
            "terminated": terminated,
            "truncated": ends & ~terminated,
            "done": ends | terminated,
            "act_next": np.frombuffer(columns.act_next, dtype=np.int64)[order],
            "episode_id": episode_ids[order],
            "episode_return": np.frombuffer(columns.episode_return, dtype=np.float32)[order],
        }
        write_pool_transitions(file, obs_frames[order], obs_next_frames[order], transition_columns)
        file.attrs["name"] = shard_path.name
        file.attrs["source"] = "RL Unplugged Atari (DQN replay)"
        file.attrs["frame_padding"] = DOPAMINE_PADDING
        file.attrs["corrupt_records_skipped"] = skipped
        if task := recorded_task(shard_path):  # what atari_cql.py evaluates the buffer on by default
            file.attrs["task"] = task
        in_ram = frames.size + obs_frames.nbytes + obs_next_frames.nbytes
        in_ram += sum(values.nbytes for values in transition_columns.values())
    transitions = len(columns)
    return ShardSummary(
        shard=shard_path,
        output=output_path,
        transitions=transitions,
        episodes=len(np.unique(episode_ids)),
        terminals=int(terminated.sum()),
        skipped=skipped,
        frames=pool.size,
        bytes_per_transition=in_ram / transitions,
        seconds=time.perf_counter() - started,
        note=note,
    )


def _read_shard(
    shard: Path,
    pool: FramePool,
    skip_corrupt: bool,
    on_bytes_read: Callable[[int], None] | None,
) -> tuple[_Columns, int, str]:
    """Stream the shard's records into `pool` and per-transition columns; (columns, skipped, note)."""
    columns = _Columns()
    skipped = 0
    note = ""
    for record in read_records(shard, on_bytes_read=on_bytes_read):
        if record.data is None:
            if not skip_corrupt:
                raise ShardError(f"{shard}: record {record.index}: {record.problem}")
            skipped += 1
            if record.fatal:
                note = f"stopped at record {record.index}: {record.problem}"
                break
            continue
        try:
            transition = parse_transition(record.data)
            indices = pool.indices(transition.o_t + transition.o_tp1, _FRAME_NAMES)
        except (RecordError, FrameError) as error:
            if not skip_corrupt:
                raise ShardError(f"{shard}: record {record.index}: {error}") from None
            skipped += 1
            continue
        columns.obs_frames.extend(indices[:STACK])
        columns.obs_next_frames.extend(indices[STACK:])
        columns.act.append(transition.a_t)
        columns.act_next.append(transition.a_tp1)
        columns.rew.append(transition.r_t)
        columns.discount.append(transition.d_t)
        columns.episode_id.append(transition.episode_id)
        columns.episode_return.append(transition.episode_return)
    return columns, skipped, note
