"""What the benchmark timer needs of another library's implementation, so that it times it exactly as it
times Tianshou's and ours (`timing.updates_per_second`)."""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any


def installed(module: str, flag: str) -> bool:
    """Whether another library's `module` is installed, for its column to run. One that is installed
    but fails to import (a dependency missing, as with wheels installed without theirs) stops the
    benchmark with the reason, rather than quietly timing one column fewer; `flag none` leaves it out."""
    if importlib.util.find_spec(module) is None:
        return False
    try:
        importlib.import_module(module)
    except ImportError as error:
        raise SystemExit(f"{module} is installed but does not import ({error}); {flag} none leaves it out") from None
    return True


def requested_modes(
    flag: str | None,
    *,
    module: str,
    option: str,
    modes: tuple[str, ...],
    default: str,
    cuda_only: tuple[str, ...] = (),
    device: str = "cpu",
) -> list[str]:
    """The modes of another library's column that `option` (value `flag`) asks for: none where the
    library is not installed or `flag` is 'none', `default` (comma-separated) where `flag` is not
    given; a mode it does not have, or a CUDA-only one on another device, exits with a usage line."""
    if flag == "none" or not installed(module, option):
        return []
    chosen = (flag or default).split(",")
    unknown = [mode for mode in chosen if mode not in modes or (mode in cuda_only and device != "cuda")]
    if unknown:
        only = f" ({', '.join(cuda_only)}: CUDA only)" if cuda_only else ""
        raise SystemExit(f"{option} {flag}: {', '.join(unknown)} not one of {', '.join(modes)}{only}")
    return chosen


@dataclass(frozen=True)
class CQLSetup:
    """The continuous benchmark's configuration, given alike to every library's column: each column maps
    it to its own library's names (TorchRL's `num_random`, d3rlpy's `n_action_samples`, ...)."""

    obs_dim: int
    act_dim: int
    alpha: float
    """the entropy temperature, held fixed"""
    cql_weight: float
    """the conservative term's weight"""
    n_actions: int
    """actions sampled per group for the conservative term"""
    batch_size: int
    hidden_sizes: tuple[int, ...]
    """every actor's and critic's hidden layers"""


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
