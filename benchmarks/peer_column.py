"""What the benchmark timer needs of another library's implementation, so that it times it exactly as it
times Tianshou's and ours (`timing.updates_per_second`)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


class PeerColumn:
    """Duck-types the part of a Tianshou algorithm the benchmark timer drives: `policy` (for
    `policy_within_training_step`), `process_buffer` and `update(buffer, sample_size)`. A peer holds its
    own copy of the data, made by `process_buffer`, and ignores the buffer given to `update`."""

    warmup_updates = 5
    """Updates run before timing: lazy initialisation, compilation, a CUDA graph's capture."""

    def __init__(self) -> None:
        self.policy = SimpleNamespace(is_within_training_step=False)

    def process_buffer(self, buffer: Any) -> None:
        raise NotImplementedError

    def update(self, buffer: Any = None, sample_size: int | None = None) -> Any:
        raise NotImplementedError
