"""Batches for a GPU from staged transitions that stay in host memory, copied one update ahead.

Why: an Atari dataset of 1M transitions holds ~7 GB of frames, which may not fit beside the
networks (or beside other runs sharing the GPU). Then the transitions stay staged in host memory
(`stage_transitions(..., on_device=False)`), and each update's batch is gathered there into a
pinned buffer and copied to the GPU on a stream of its own while the previous update runs. The
update itself reads a fixed set of device tensors (`inputs`), so it can still be captured as one
CUDA graph; only the small copy into `inputs` sits between two replays.

One update's order of work: `advance()` makes the prefetched batch the `inputs` (the device waits
for its copy, then copies it over on its own stream and marks the incoming buffer free), the update
is launched, `prefetch()` gathers the next batch on the host (the host waits only until the
previous copy out of the pinned buffer has finished) and starts its copy, which waits until
`advance()` has read the incoming buffer. On a CPU there is nothing to overlap: the batch is
gathered straight into `inputs` once the update that read them has run.
"""

from __future__ import annotations

import torch

from offline_rl.algorithms.discrete_cql.staging import StagedTransitions


class HostBatchFeed:
    """Fixed-address device batches drawn uniformly from host-resident `host` transitions."""

    def __init__(
        self, host: StagedTransitions, batch_size: int, device: torch.device, generator: torch.Generator
    ) -> None:
        self.host, self.batch_size, self.device, self.generator = host, batch_size, device, generator
        template = host.take(torch.zeros(batch_size, dtype=torch.long))
        self.inputs = tuple(torch.empty_like(part, device=device) for part in template)
        self._on_gpu = device.type == "cuda"
        self._gathered = self.inputs  # on a CPU the update has finished before the next gather
        if self._on_gpu:
            self._gathered = tuple(torch.empty(part.shape, dtype=part.dtype, pin_memory=True) for part in template)
            self._incoming = tuple(torch.empty_like(part) for part in self.inputs)
            self._copy_stream = torch.cuda.Stream(device)
            for part in self._incoming:  # freed only once the copy stream's work on it is done
                part.record_stream(self._copy_stream)
            self._copied = torch.cuda.Event()  # the incoming buffer holds the gathered batch
            self._consumed = torch.cuda.Event()  # advance() has read the incoming buffer
        self.prefetch()

    def draw(self) -> torch.Tensor:
        """The next batch's transition rows (host tensor), from this feed's own generator."""
        return self.host.draw(self.batch_size, self.generator)

    def prefetch(self) -> None:
        """Gather the next batch on the host and, on a GPU, start copying it to the device."""
        if self._on_gpu:
            self._copied.synchronize()  # the pinned buffer is free once its last copy has finished
        self.host.take(self.draw(), out=self._gathered)
        if self._on_gpu:
            self._copy_stream.wait_event(self._consumed)
            with torch.cuda.stream(self._copy_stream):
                for target, part in zip(self._incoming, self._gathered, strict=True):
                    target.copy_(part, non_blocking=True)
                self._copied.record()

    def advance(self) -> tuple[torch.Tensor, ...]:
        """Make the prefetched batch the `inputs` the next update reads; returns them."""
        if not self._on_gpu:
            return self.inputs  # prefetch() gathered straight into them
        stream = torch.cuda.current_stream(self.device)
        stream.wait_event(self._copied)
        for target, part in zip(self.inputs, self._incoming, strict=True):
            target.copy_(part, non_blocking=True)
        self._consumed.record(stream)
        return self.inputs
