"""Discrete CQL's transitions prepared once per training run and held on the algorithm's device.

Why: otherwise every update walks its n-step windows in numpy and copies its frame stacks from host
memory, work a CUDA graph cannot contain and a copy that waits for the GPU. A transition's n-step
return, bootstrap weight and the frames of its two stacks depend only on the data, so they are
computed once; a batch is then a handful of gathers on the device, and the whole update can be
recorded and replayed. Frames are stored once (a frame-stacked buffer's pool, or a plain buffer's
`obs` and `obs_next` arrays); each transition keeps the row numbers of its stacks' frames. A
dataset too big for the GPU stays staged in host memory, and `host_feed` brings its batches over.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tianshou.data import ReplayBuffer

from offline_rl.data.frame_pool import FramePoolBuffer
from offline_rl.data.frame_stack import FrameStackBuffer

DEVICE_MEMORY_SHARE = 0.6
"""The staged data may take at most this share of the GPU's free memory (the rest: networks,
activations, other runs sharing the GPU)."""


@dataclass
class SourceBatches:
    """Batches drawn a source file at a time: a file picked uniformly, then rows uniformly within it,
    as batch_rl's FixedReplayBuffer draws each batch from one DQN Replay checkpoint's replay. All on
    the tables' device, with no host read, so a captured update can draw them too."""

    order: torch.Tensor  # (N,) the staged rows, grouped by file
    starts: torch.Tensor  # (S,) where each file's rows begin in `order`
    counts: torch.Tensor  # (S,) how many rows it has (each > 0)

    @classmethod
    def of(cls, sources: np.ndarray, device: torch.device) -> SourceBatches:
        """Grouped from each staged row's file number (files with no sampleable transition left out)."""
        order = np.argsort(sources, kind="stable")
        _, starts, counts = np.unique(np.asarray(sources)[order], return_index=True, return_counts=True)
        return cls(*(torch.as_tensor(part, dtype=torch.long).to(device) for part in (order, starts, counts)))

    def draw(self, batch_size: int, generator: torch.Generator | None = None) -> torch.Tensor:
        device = self.order.device
        source = torch.randint(len(self.starts), (1,), device=device, generator=generator)
        count = self.counts[source]
        uniform = torch.rand(batch_size, dtype=torch.float64, device=device, generator=generator)
        within = torch.minimum((uniform * count).long(), count - 1)  # float rounding never reaches `count`
        return self.order[self.starts[source] + within]


@dataclass
class StagedTransitions:
    """Per-transition tables over frame tensors; `sample` draws a batch without leaving the device."""

    obs_frames: torch.Tensor  # (F, ...) rows that `obs_rows` index
    next_frames: torch.Tensor  # the same tensor for frame buffers; a plain buffer's obs_next
    obs_rows: torch.Tensor  # (N, K) long: the K frames of each transition's observation
    next_rows: torch.Tensor  # (N, K) long: those of the observation its n-step target bootstraps from
    act: torch.Tensor  # (N,) long (action indices), or (N, A) for fitted Q evaluation's continuous actions
    returns: torch.Tensor  # (N,) float: n-step return
    bootstrap: torch.Tensor  # (N,) float: γ^m·(1 − terminated)
    stacked: bool  # K frames form one observation; else K = 1 and the row is the observation
    host_reason: str | None = None  # why these tables stay in host memory rather than on the GPU
    sources: SourceBatches | None = None  # batches a file at a time (--batch-per-file); None: all alike

    def __len__(self) -> int:
        return len(self.act)

    def draw(self, batch_size: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """A batch's rows: uniform over all transitions, or over one file's (`sources`)."""
        if self.sources is not None:
            return self.sources.draw(batch_size, generator)
        return torch.randint(len(self), (batch_size,), device=self.act.device, generator=generator)

    def sample(self, batch_size: int) -> tuple[torch.Tensor, ...]:
        return self.take(self.draw(batch_size))

    def sample_batches(self, rows: int, batch_size: int) -> tuple[torch.Tensor, ...]:
        """`rows` transitions as consecutive batches of `batch_size` (a seed batch's, one per seed), each
        batch from one file of its own when batches are drawn a file at a time."""
        if self.sources is None or rows == batch_size:
            return self.sample(rows)
        return self.take(torch.cat([self.draw(batch_size) for _ in range(rows // batch_size)]))

    def take(self, rows: torch.Tensor, out: tuple[torch.Tensor, ...] | None = None) -> tuple[torch.Tensor, ...]:
        """(obs, act, returns, bootstrap, obs_next) of the given transitions, gathered into `out`
        (tensors of those shapes, e.g. pinned buffers) when it is given."""
        obs_rows, next_rows = self.obs_rows[rows], self.next_rows[rows]
        if not self.stacked:
            obs_rows, next_rows = obs_rows[:, 0], next_rows[:, 0]
        sources = (
            (self.obs_frames, obs_rows),
            (self.act, rows),
            (self.returns, rows),
            (self.bootstrap, rows),
            (self.next_frames, next_rows),
        )
        if out is None:
            return tuple(table[index] for table, index in sources)
        for (table, index), target in zip(sources, out, strict=True):
            torch.index_select(table, 0, index.reshape(-1), out=target.view(-1, *table.shape[1:]))
        return out


def stack_rows(newest: np.ndarray, first: np.ndarray, stack: int) -> np.ndarray:
    """Frame rows of stacks ending at `newest`, clamped at each episode's first frame (as
    `FrameStackObservation(padding_type="reset")` pads)."""
    return np.maximum(newest[:, None] + np.arange(-stack + 1, 1), first[:, None])


def unsupported(buffer: ReplayBuffer) -> str | None:
    """Why `buffer`'s observations cannot be staged, or None."""
    if isinstance(buffer, FrameStackBuffer | FramePoolBuffer):
        return None
    if int(buffer.options.get("stack_num", 1)) > 1:
        return "a Tianshou buffer that stacks frames at sampling time (stack_num > 1)"
    if not isinstance(buffer.obs, np.ndarray) or not isinstance(buffer.obs_next, np.ndarray):
        return "observations that are not one array (dict observations)"
    return None


def frame_tables(buffer: ReplayBuffer, indices: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, ...]:
    """(obs frames, next frames, obs rows, next rows, stacked) for the transitions at `indices`
    whose n-step windows end at `last`."""
    if isinstance(buffer, FrameStackBuffer):
        newest, first, stack = buffer.frame_index, buffer.episode_first_frame, buffer.frame_stack
        obs_rows = stack_rows(newest[indices], first[indices], stack)
        next_rows = stack_rows(newest[last] + 1, first[last], stack)
        return buffer.frames, buffer.frames, obs_rows, next_rows, True
    if isinstance(buffer, FramePoolBuffer):
        return buffer.frames, buffer.frames, buffer.obs_frames[indices], buffer.obs_next_frames[last], True
    return buffer.obs, buffer.obs_next, indices[:, None], last[:, None], False


def as_device_tensor(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A tensor on `device`; on the CPU it shares the array's memory where it can (no copy)."""
    array = np.asarray(array)
    if device.type == "cpu" and array.flags.c_contiguous and array.flags.writeable:
        return torch.from_numpy(array)
    return torch.as_tensor(np.ascontiguousarray(array)).to(device)


def device_shortfall(nbytes: int, device: torch.device) -> str | None:
    """Why `nbytes` of data should not move to `device`, or None."""
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    if nbytes > DEVICE_MEMORY_SHARE * free:
        return f"the dataset's {nbytes / 2**30:.1f} GiB do not fit in the GPU's {free / 2**30:.1f} GiB free"
    return None


def stage_transitions(
    buffer: ReplayBuffer,
    returns: np.ndarray,
    bootstrap: np.ndarray,
    indices: np.ndarray,
    last: np.ndarray,
    device: torch.device,
    *,
    on_device: bool | None = None,
    act_dtype: torch.dtype = torch.long,
) -> StagedTransitions | str:
    """The staged transitions at `indices` (their n-step `returns`, `bootstrap` weights and window
    ends `last` already computed), or why they cannot be staged. They are held on `device` when
    `on_device` is True, or None and they fit there; otherwise in host memory, with `host_reason`
    saying why (a `HostBatchFeed` then brings each batch to the device). Actions are action indices
    unless `act_dtype` says otherwise (fitted Q evaluation stages continuous actions too)."""
    reason = unsupported(buffer)
    if reason is not None:
        return reason
    obs_frames, next_frames, obs_rows, next_rows, stacked = frame_tables(buffer, indices, last)
    frame_bytes = obs_frames.nbytes + (0 if next_frames is obs_frames else next_frames.nbytes)
    host_reason = "kept in host memory as asked" if on_device is False else None
    if on_device is None:
        host_reason = device_shortfall(frame_bytes + 40 * len(indices) * obs_rows.shape[1], device)
    if host_reason is not None:
        device = torch.device("cpu")
    obs_tensor = as_device_tensor(obs_frames, device)
    next_tensor = obs_tensor if next_frames is obs_frames else as_device_tensor(next_frames, device)
    return StagedTransitions(
        obs_frames=obs_tensor,
        next_frames=next_tensor,
        obs_rows=torch.as_tensor(obs_rows, dtype=torch.long).to(device),
        next_rows=torch.as_tensor(next_rows, dtype=torch.long).to(device),
        act=torch.as_tensor(np.asarray(buffer.act[indices]), dtype=act_dtype).to(device),
        returns=torch.as_tensor(returns, dtype=torch.float32).to(device),
        bootstrap=torch.as_tensor(bootstrap, dtype=torch.float32).to(device),
        stacked=stacked,
        host_reason=host_reason,
    )
