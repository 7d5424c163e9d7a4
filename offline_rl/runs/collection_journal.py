"""Keep a long collection's transitions on disk as it goes, so an interrupted one continues.

Playing a policy into a 1M-transition Atari dataset takes long and holds ~7 GB in RAM until the
buffer file is written at the end; a Ctrl-C, a closed laptop or a killed job would lose all of it.
So every so often the rows each env's recorder gained since the last time (`FrameStackBufferBuilder`
or `TransitionRecorder`: `position`, `rows_since`, `extend`, `close_running_episode`) go into a
numbered part file in `<output>.parts/`. A part is written atomically, so it is either complete or
absent. Running the same command again reads the parts
back, in order, into fresh recorders and collects only what is missing; the directory is removed
once the output is written.

An environment cannot be restored in the middle of an episode, so the episode each env was playing
when a session stopped is closed there as truncated (the data stops; its last state is still
bootstrapped from) and the env starts a new one: a continued collection never joins two episodes.
Each part records which session wrote it, and the cut is made again at every change of session
whenever the parts are read.

The settings that shape the data (task, policy, ε, size, envs, seed) are kept with the parts: a
command with other settings is refused instead of mixing two collections in one file. One process
at a time keeps parts in a folder (`offline_rl.core.files`): the same command started twice is
refused while the first runs, rather than the two writing, and one removing, the same parts.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import h5py
import numpy as np

from offline_rl.core.errors import DatasetError, OfflineRLError, first_line
from offline_rl.core.files import FileLock, atomic_hdf5
from offline_rl.data.hdf5_files import says_file_is_damaged

JOURNAL_FORMAT = "offline_rl.collection_journal/1"
PART_NAME = re.compile(r"part-(\d{5})\.hdf5")
LOCK_NAME = ".lock"
FRAME_KEYS = ("frame_start", "frames")
"""A frame-stacked recorder's own columns, which are not one row per transition."""


class Recorder(Protocol):
    """What the journal needs from a per-env recorder."""

    def __len__(self) -> int: ...
    def position(self) -> tuple[int, ...]: ...
    def rows_since(self, position: Any) -> dict[str, np.ndarray]: ...
    def extend(self, rows: dict[str, np.ndarray]) -> None: ...
    def close_running_episode(self) -> None: ...


def journal_directory(output: Path) -> Path:
    """Where the parts of the collection bound for `output` are kept: `<output>.parts/`."""
    return output.with_name(output.name + ".parts")


@dataclass
class CollectionJournal:
    """The parts of one collection; `open` reads back what earlier sessions kept."""

    directory: Path
    settings: dict[str, Any]
    """The settings that shape the data, by flag (`{"--task": "PongNoFrameskip-v4", ...}`)."""
    session: int = 0
    """0 for a fresh collection, then one more for each command that continued it."""
    returns: list[float] = field(default_factory=list)
    """Returns of the episodes that finished, in every session so far."""
    every: int = 50_000
    """Transitions gained between two parts kept by `keep_if_due`."""
    _next_part: int = field(default=0, init=False)
    _positions: list[tuple[int, ...]] = field(default_factory=list, init=False)
    _returns_kept: int = field(default=0, init=False)
    _lock: FileLock | None = field(default=None, init=False)

    @classmethod
    def open(
        cls, directory: Path, settings: dict[str, Any], recorders: Sequence[Recorder], every: int = 50_000
    ) -> CollectionJournal:
        """Fill the empty `recorders` from the parts in `directory` (if any), closing each session's
        running episodes, and return the journal that keeps the rest of the collection. It holds the
        folder's lock until `remove` or `release`; a folder another process holds is refused."""
        settings = json.loads(json.dumps(settings, default=str))  # as they read back from a part
        journal = cls(directory, settings, every=every)
        lock = FileLock(directory / LOCK_NAME)
        if not lock.acquire(wait=False):
            raise OfflineRLError(
                f"{directory}: another collection with this output is running and keeps its parts here; "
                "wait for it to finish, or choose another output"
            )
        journal._lock = lock
        try:
            journal._read_parts(recorders)
        except BaseException:
            journal.release()
            raise
        return journal

    def _read_parts(self, recorders: Sequence[Recorder]) -> None:
        """Add every kept part to `recorders`, in order, then close the running episodes."""
        directory = self.directory
        parts = sorted(
            (int(match.group(1)), path)
            for path in (directory.iterdir() if directory.is_dir() else ())
            if (match := PART_NAME.fullmatch(path.name))
        )
        last_session: int | None = None
        for number, path in parts:
            if number != self._next_part:
                raise DatasetError(
                    f"{directory}: part-{self._next_part:05d}.hdf5 is missing; "
                    f"delete {directory} to start the collection again"
                )
            last_session = self._read_part(path, recorders, last_session)
            self._next_part = number + 1
        if last_session is not None:
            self.session = last_session + 1
            for recorder in recorders:
                recorder.close_running_episode()
        self._positions = [recorder.position() for recorder in recorders]
        self._returns_kept = len(self.returns)

    def _read_part(self, path: Path, recorders: Sequence[Recorder], last_session: int | None) -> int:
        """Add one part's rows to `recorders`, after checking that it belongs here and closing the
        running episodes if another session wrote it; its session."""
        try:
            with h5py.File(path, "r") as file:
                if file.attrs.get("format") != JOURNAL_FORMAT:
                    raise DatasetError(f"{path}: not a part of an offline_rl collection")
                self._check_settings(json.loads(file.attrs["settings"]))
                if int(file.attrs["envs"]) != len(recorders):
                    raise DatasetError(f"{path}: holds {int(file.attrs['envs'])} envs' rows, expected {len(recorders)}")
                session = int(file.attrs["session"])
                if last_session is not None and session != last_session:
                    for recorder in recorders:
                        recorder.close_running_episode()
                for index, recorder in enumerate(recorders):
                    rows = {key: value[()] for key, value in file[f"env{index}"].items()}
                    if len({len(rows[key]) for key in rows if key not in FRAME_KEYS}) > 1:
                        raise DatasetError(f"{path}: env {index}'s columns differ in length")
                    recorder.extend(rows)
                self.returns += file["returns"][()].tolist()
                return session
        except OfflineRLError:
            raise
        except Exception as error:
            if not says_file_is_damaged(error):
                raise
            raise DatasetError(
                f"{path}: unreadable ({first_line(error)}); delete {self.directory} to start the collection again"
            ) from None

    def _check_settings(self, kept: dict[str, Any]) -> None:
        flags = sorted(set(kept) | set(self.settings))
        differing = [flag for flag in flags if kept.get(flag) != self.settings.get(flag)]
        if differing:
            then = ", ".join(f"{flag} {kept.get(flag)}" for flag in differing)
            now = ", ".join(f"{flag} {self.settings.get(flag)}" for flag in differing)
            raise OfflineRLError(
                f"{self.directory}: holds part of a collection made with {then}, not {now}; "
                f"run the command with those settings to continue it, or delete {self.directory} to start again"
            )

    @property
    def transitions(self) -> int:
        """Transitions kept so far, in every session."""
        return sum(position[0] for position in self._positions)

    def keep_if_due(self, recorders: Sequence[Recorder], returns: Sequence[float]) -> None:
        """`keep` once the recorders have gained `every` transitions since the last part."""
        if sum(recorder.position()[0] for recorder in recorders) - self.transitions >= self.every:
            self.keep(recorders, returns)

    def keep(self, recorders: Sequence[Recorder], returns: Sequence[float]) -> Path | None:
        """Write what `recorders` and `returns` gained since the last part as the next part; `None`
        when they gained nothing. The part counts only once it is complete."""
        positions = [recorder.position() for recorder in recorders]
        if positions == self._positions and len(returns) == self._returns_kept:
            return None
        path = self.directory / f"part-{self._next_part:05d}.hdf5"
        with atomic_hdf5(path) as file:
            file.attrs["format"] = JOURNAL_FORMAT
            file.attrs["settings"] = json.dumps(self.settings)
            file.attrs["session"] = self.session
            file.attrs["envs"] = len(recorders)
            for index, (recorder, since) in enumerate(zip(recorders, self._positions, strict=True)):
                group = file.create_group(f"env{index}")
                for key, column in recorder.rows_since(since).items():
                    group.create_dataset(key, data=column, **_storage(column))
            file.create_dataset("returns", data=np.asarray(returns[self._returns_kept :], dtype=np.float64))
        self._positions, self._returns_kept, self._next_part = positions, len(returns), self._next_part + 1
        return path

    def remove(self) -> None:
        """Delete the parts once the collection they belong to is written in full."""
        shutil.rmtree(self.directory, ignore_errors=True)
        self.release()

    def release(self) -> None:
        """Let another process keep parts in the folder (the parts stay; a folder that holds none
        goes); the end of the process releases it too."""
        if self._lock is None:
            return
        if self.directory.is_dir() and [path.name for path in self.directory.iterdir()] == [LOCK_NAME]:
            shutil.rmtree(self.directory, ignore_errors=True)  # while still held: nobody else is in it
        self._lock.release()
        self._lock = None


def _storage(column: np.ndarray) -> dict[str, Any]:
    """How a part stores a column: LZF-compressed, in chunks of whole rows of about 1 MB.

    LZF: Atari frames shrink many times over at about the speed of an uncompressed write, and frames
    that do not compress cost less than gzip's fastest level would. Whole rows: h5py's own guess of
    chunks for 84×84 frames cuts every frame into pieces, which made writing and reading slower."""
    if not (column.ndim and column.size):
        return {}
    row_bytes = max(1, column[0].nbytes)
    rows = int(min(len(column), max(1, 2**20 // row_bytes)))
    return {"compression": "lzf", "chunks": (rows, *column.shape[1:])}
