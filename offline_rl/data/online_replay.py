"""The replay buffer of online behaviour training (`examples/atari_qrdqn.py`), and saving it beside
each checkpoint so that a resumed run continues with the replay it had.

Why a subclass: Tianshou 2.0.1's off-policy trainer asks `buffer.hasnull()` after every collection
step, and the buffer answers by reading back every stored transition, which for a frame-stacked
Atari buffer means re-stacking all of them (~28 KB each). Every 10 environment steps the whole
replay is read, so a run slows down as its buffer fills. Checking each batch once, as it is added,
gives the same answer at a cost that does not grow with the buffer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from tianshou.data import Batch, VectorReplayBuffer

from offline_rl.core.errors import first_line
from offline_rl.core.files import atomic_hdf5
from offline_rl.data.hdf5_files import says_file_is_damaged

REPLAY_FORMAT = "offline_rl.online_replay/1"
RESTORE_CHUNK = 4096
"""Steps per env read from the file at a time while restoring (bounded memory for Atari replays)."""


class NullCheckedVectorReplayBuffer(VectorReplayBuffer):
    """`VectorReplayBuffer` whose `hasnull()` is O(1): whether any batch added since the last reset
    held a NaN or None, recorded when it was added (the trainer's check, without its full scan).
    Once true it stays true until `reset`, even after the ring overwrote that batch: the trainer
    stops at the first true answer, which comes right after the add, as with the full scan."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._null_added = False
        super().__init__(*args, **kwargs)

    def reset(self, keep_statistics: bool = False) -> None:
        self._null_added = False
        super().reset(keep_statistics=keep_statistics)

    def add(self, batch: Batch, buffer_ids: np.ndarray | list[int] | None = None) -> Any:
        self._null_added = self._null_added or batch.hasnull()
        return super().add(batch, buffer_ids=buffer_ids)

    def hasnull(self) -> bool:
        return self._null_added


def replay_layout(replay: VectorReplayBuffer) -> dict[str, Any]:
    """What a saved replay must match to be restored into `replay`: envs, size per env, stacking."""
    return {"buffer_num": int(replay.buffer_num), "size": int(replay.buffers[0].maxsize), **replay.options}


def _stored_keys(replay: VectorReplayBuffer) -> list[str]:
    keys = ["obs", "act", "rew", "terminated", "truncated"]
    return keys if replay.options["ignore_obs_next"] else [*keys, "obs_next"]


def save_replay(replay: VectorReplayBuffer, path: str | os.PathLike[str]) -> Path:
    """Write each env's transitions in the order they were added, in their stored form (one frame
    per step when the replay stacks frames), atomically. `info` is not kept: the learner never
    reads it."""
    final = Path(path).expanduser()
    with atomic_hdf5(final) as file:
        file.attrs["format"] = REPLAY_FORMAT
        file.attrs["layout"] = json.dumps(replay_layout(replay))
        for number, sub_buffer in enumerate(replay.buffers):
            group = file.create_group(str(number))
            order = sub_buffer.sample_indices(0)  # oldest first
            for key in _stored_keys(replay) if len(order) else []:
                group.create_dataset(key, data=np.asarray(sub_buffer.get(order, key, stack_num=1)))
    return final


def restore_replay(replay: VectorReplayBuffer, path: str | os.PathLike[str], *, cut_running: bool = True) -> str | None:
    """Refill the empty `replay` from `save_replay`'s file; None on success, else why it was not
    restored (another layout: other envs or stacking than this run's, or a size that holds fewer
    transitions than the file; a damaged file), in which case `replay` is left empty.

    The transitions are added again in their original order, so Tianshou's episode bookkeeping is
    rebuilt by its own `add`. An episode still running when the file was written is cut there as
    truncated (`cut_running`) where the envs start new episodes after a resume: without the cut the next
    transition added would continue the old episode, bridging two episodes in n-step returns. Where the
    envs are put back where they were (`offline_rl.envs.resumable`), their episodes go on, uncut.
    """
    try:
        return _refill(replay, Path(path).expanduser(), cut_running)
    except Exception as error:
        if not says_file_is_damaged(error):
            raise
        replay.reset()
        return f"{path} is unreadable ({first_line(error)})"


def _refill(replay: VectorReplayBuffer, path: Path, cut_running: bool) -> str | None:
    with h5py.File(path, "r") as file:
        if file.attrs.get("format") != REPLAY_FORMAT:
            return f"{path} is not a replay saved by offline_rl"
        saved, mine = json.loads(file.attrs["layout"]), replay_layout(replay)
        if {**saved, "size": 0} != {**mine, "size": 0}:
            return f"{path} holds a replay of {saved}, this run's is {mine}"
        groups = [file[str(number)] for number in range(replay.buffer_num)]
        lengths = [len(group["act"]) if "act" in group else 0 for group in groups]
        if saved["size"] != mine["size"] and max(lengths, default=0) > mine["size"]:  # a larger one holds them all
            return f"{path} holds a replay of {saved}, this run's is {mine}"
        for start in range(0, max(lengths, default=0), RESTORE_CHUNK):
            window = slice(start, start + RESTORE_CHUNK)
            chunk = {number: _read_steps(group, replay, window, cut_running) for number, group in enumerate(groups)}
            for step in range(start, min(window.stop, max(lengths))):
                present = [number for number, length in enumerate(lengths) if length > step]
                rows = {key: np.stack([chunk[number][key][step - start] for number in present]) for key in chunk[0]}
                if replay.options["save_only_last_obs"]:  # `add` keeps the last frame of each stack
                    rows = {key: value[:, None] if key.startswith("obs") else value for key, value in rows.items()}
                replay.add(Batch(rows), buffer_ids=present)
    return None


def _read_steps(
    group: h5py.Group, replay: VectorReplayBuffer, window: slice, cut_running: bool
) -> dict[str, np.ndarray]:
    """One env's stored steps in `window`; if its newest step is among them and its episode was still
    running, that step is marked truncated (see `restore_replay`) where `cut_running`."""
    steps = {key: group[key][window] if key in group else np.empty(0) for key in _stored_keys(replay)}
    if cut_running and "act" in group and window.stop >= len(group["act"]) and len(steps["act"]):
        newest = len(steps["act"]) - 1
        steps["truncated"][newest] |= not steps["terminated"][newest]
    return steps
