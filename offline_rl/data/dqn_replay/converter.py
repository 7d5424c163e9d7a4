"""Convert one DQN Replay checkpoint (a Dopamine replay) into a `FramePoolBuffer` file.

The replay's frames become the buffer's frame pool as they are (slot i is pool frame i), streamed
from the compressed file a block at a time into the output, so memory stays near the small
per-slot arrays (9 bytes a slot) whatever the checkpoint's size. Each transition Dopamine would
sample (`offline_rl.data.dqn_replay.slots`) becomes a row whose stacks index the pool: the same states,
black padding at episode starts included, that the DQN Replay agents saw. The file is built under a
temporary name and renamed when complete.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from offline_rl.core.errors import DatasetError
from offline_rl.core.files import atomic_hdf5
from offline_rl.data.dqn_replay.npy_stream import NpyStream, read_npy
from offline_rl.data.dqn_replay.slots import episode_cuts, frame_stacks, sampled_slots
from offline_rl.data.dqn_replay.sources import ADD_COUNT, array_file, checkpoint_label, recorded_task
from offline_rl.data.frame_padding import DOPAMINE_PADDING
from offline_rl.data.frame_pool import write_pool_transitions

_FRAMES_PER_BLOCK = 2048  # 14 MB of 84x84 frames in memory at a time
_FRAMES_PER_CHUNK = 256  # HDF5 chunk: 1.8 MB of frames
_SLOT_ARRAYS = {"action": ("iu", "integer"), "reward": ("f", "floating"), "terminal": ("iub", "integer or boolean")}
"""The per-slot arrays besides the frames: the dtype kinds accepted, and how an error names them."""


@dataclass(frozen=True)
class CheckpointSummary:
    checkpoint: str
    output: Path
    slots_read: int
    transitions: int
    episodes: int
    terminals: int
    bytes_per_transition: float
    seconds: float

    def line(self) -> str:
        rate = self.transitions / self.seconds if self.seconds > 0 else float("inf")
        return (
            f"{self.checkpoint}: {self.transitions} transitions from {self.slots_read} slots, "
            f"{self.episodes} episodes (in part or whole), {self.terminals} terminals, "
            f"{self.bytes_per_transition / 1024:.1f} KB/transition in RAM, {self.seconds:.1f} s, "
            f"{rate:.0f} transitions/s -> {self.output}"
        )


def convert_checkpoint(
    replay_dir: str | Path,
    checkpoint: int,
    output: str | Path,
    *,
    fraction: float = 1.0,
    compression: str | None = None,
    frames_url: str | None = None,
    on_total: Callable[[int], None] | None = None,
    on_frames: Callable[[int], None] | None = None,
) -> CheckpointSummary:
    """Convert checkpoint `checkpoint` of the Dopamine replay in `replay_dir` into a buffer at `output`,
    keeping the transitions within its first `fraction` of slots (1.0: all of them). Where the frame
    file is not in `replay_dir`, it is read from `frames_url` as it downloads, and only as far as the
    slots kept: a checkpoint's first 1% is ~1% of its largest file. `on_total` hears how many frames
    will be copied once that is known, `on_frames` each block as it is."""
    folder, output_path = Path(replay_dir).expanduser(), Path(output).expanduser()
    name = f"{folder}/*_ckpt.{checkpoint}.gz"
    started = time.perf_counter()
    files = CheckpointFiles.find(folder, checkpoint, frames_url)
    add_count = files.add_count()
    with NpyStream(files.frames) as frames_in:
        if len(frames_in.shape) != 3 or frames_in.dtype != np.uint8:
            raise DatasetError(
                f"{files.frames}: expected frames (slots, height, width) of uint8, "
                f"found {frames_in.shape} of {frames_in.dtype}"
            )
        capacity = frames_in.shape[0]
        window = capacity if fraction >= 1.0 else max(round(capacity * fraction), 0)
        present = window if add_count >= capacity else min(window, add_count)
        columns = {key: _slot_array(path, key, capacity, present) for key, path in files.slot_arrays.items()}
        terminal = columns["terminal"].astype(bool)
        slots = sampled_slots(terminal, add_count, capacity, present)
        if not len(slots):
            raise DatasetError(
                f"{name}: no whole transition in the {present} slot(s) read (add_count {add_count}); "
                "keep a larger --fraction"
            )
        obs, obs_next = frame_stacks(slots, capacity)
        terminated = terminal[slots]
        truncated = episode_cuts(slots, terminal, capacity)
        if on_total is not None:
            on_total(present)
        with atomic_hdf5(output_path) as file:
            _copy_frames(frames_in, present, file, compression, on_frames)
            transition_columns = {
                "act": columns["action"][slots].astype(np.int64),
                "rew": columns["reward"][slots].astype(np.float32),
                "terminated": terminated,
                "truncated": truncated,
                "done": terminated | truncated,
            }
            write_pool_transitions(file, obs, obs_next, transition_columns)
            file.attrs["name"] = checkpoint_label(folder, checkpoint, fraction)
            file.attrs["source"] = "DQN Replay (Dopamine replay checkpoint)"
            file.attrs["frame_padding"] = DOPAMINE_PADDING
            file.attrs["checkpoint"] = checkpoint
            file.attrs["slots_read"] = present
            if task := recorded_task(folder):  # what atari_cql.py evaluates the buffer on by default
                file.attrs["task"] = task
    done = terminated | truncated
    in_ram = present * int(np.prod(frames_in.shape[1:])) + obs.size * 4 * 2 + len(slots) * (8 + 4 + 3)
    return CheckpointSummary(
        checkpoint=name,
        output=output_path,
        slots_read=present,
        transitions=len(slots),
        episodes=int(done[:-1].sum()) + 1,
        terminals=int(terminated.sum()),
        bytes_per_transition=in_ram / len(slots),
        seconds=time.perf_counter() - started,
    )


@dataclass(frozen=True)
class CheckpointFiles:
    """Where one checkpoint's arrays are read from: its files in the replay folder, its frames
    perhaps from a URL as they download."""

    slot_arrays: dict[str, Path]
    add_count_file: Path
    frames: Path | str

    @classmethod
    def find(cls, folder: Path, checkpoint: int, frames_url: str | None) -> CheckpointFiles:
        """The checkpoint's files, each checked to be there before any is read: a checkpoint copied in
        part fails at once, naming the first file missing, not after its frames are streamed."""
        slot_arrays = {key: folder / array_file(key, checkpoint) for key in _SLOT_ARRAYS}
        add_count_file = folder / array_file(ADD_COUNT, checkpoint)
        frames_file = folder / array_file("observation", checkpoint)
        frames: Path | str = frames_url if frames_url is not None and not frames_file.is_file() else frames_file
        for path in [*slot_arrays.values(), add_count_file, *([frames] if isinstance(frames, Path) else [])]:
            if not path.is_file():
                raise DatasetError(f"{path}: no such file (checkpoint {checkpoint} of {folder} is incomplete)")
        return cls(slot_arrays, add_count_file, frames)

    def add_count(self) -> int:
        """How many transitions the replay had added when it was saved (past its capacity once it wrapped)."""
        count = read_npy(self.add_count_file)
        if count.shape != () or count.dtype.kind not in "iu" or int(count) < 0:
            raise DatasetError(f"{self.add_count_file}: expected a count (a 0-d integer array), found {count!r}")
        return int(count)


def _copy_frames(
    frames_in: NpyStream, count: int, file: h5py.File, compression: str | None, on_frames: Callable[[int], None] | None
) -> None:
    """The first `count` frames into the buffer's frame pool, a block at a time as they decompress."""
    dataset = file.create_dataset(
        "frames",
        shape=(count, *frames_in.shape[1:]),
        chunks=(min(_FRAMES_PER_CHUNK, max(count, 1)), *frames_in.shape[1:]),
        dtype=np.uint8,
        compression=compression,
    )
    start = 0
    for block in frames_in.blocks(count, _FRAMES_PER_BLOCK):
        dataset[start : start + len(block)] = block
        start += len(block)
        if on_frames is not None:
            on_frames(len(block))


def _slot_array(path: Path, key: str, capacity: int, rows: int) -> np.ndarray:
    """The first `rows` values of the per-slot array `key`, after checking it is one."""
    kinds, described = _SLOT_ARRAYS[key]
    with NpyStream(path) as stream:
        if stream.shape != (capacity,) or stream.dtype.kind not in kinds:
            raise DatasetError(
                f"{path}: expected {capacity} {described} values (one a slot, as the frames), "
                f"found {stream.shape} of {stream.dtype}"
            )
        return stream.read_rows(rows)
