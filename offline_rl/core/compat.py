"""Every private Tianshou or torch API offline_rl relies on, in one place.

Each is used because the public API would copy data or cost more than the work it wraps (a 1M-step
dataset wrapped without a copy, a 32-transition Atari batch built in microseconds, one fused Polyak
kernel). `tests/test_compat.py` checks each against the installed versions, so an upgrade that
changes one fails there, loudly, and not as a silent wrong result somewhere else.

One exception: the two oneDNN operators behind the networks' CPU products live in
`offline_rl/algorithms/layers.py`, which must stay importable without Tianshou (exported policy files
load with torch alone). It checks them against `F.linear` at first use and falls back to torch's
BLAS if they fail, and `tests/test_cpu_products.py` requires the installed torch to pass.
"""

from __future__ import annotations

import functools
import importlib
import io
import logging
import os
import pickle
import re
import tempfile
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from tianshou.algorithm.modelfree.sac import AutoAlpha
from tianshou.data import Batch, PrioritizedReplayBuffer, ReplayBuffer
from tianshou.data.utils.converter import to_hdf5

from offline_rl.core.errors import DatasetError, first_line
from offline_rl.core.files import FileLock

_JIT_MODULES = ("tianshou.algorithm.algorithm_base", "tianshou.data.buffer.manager", "tianshou.data.utils.segtree")


def cache_tianshou_jit() -> None:
    """Keep Tianshou's numba functions compiled between processes.

    Tianshou compiles them (`@njit`, no cache) whenever a policy or a vector buffer is built: seconds
    of every run's start, paid again by every run, evaluation and test process. Numba's own on-disk
    cache, switched on per function before its first compile, makes that a one-time cost (next to
    Tianshou's sources, or in numba's user cache where those are read-only; `NUMBA_CACHE_DIR` moves
    it). Results are numba's, unchanged. Tianshou's compiling methods take a lock the machine's
    processes share (`one_compile_at_a_time`), so that runs started together before the cache exists
    (a sweep's trials) compile once rather than each.
    """

    from numba.core.registry import CPUDispatcher  # heavy (numba): loaded only when used
    from tianshou.algorithm.algorithm_base import Policy
    from tianshou.data.buffer.manager import ReplayBufferManager
    from tianshou.data.utils.segtree import SegmentTree

    for name in _JIT_MODULES:
        for function in vars(importlib.import_module(name)).values():
            if isinstance(function, CPUDispatcher) and function._cache.__class__.__name__ == "NullCache":
                function.enable_caching()
    for owner in (Policy, ReplayBufferManager, SegmentTree):
        declared = vars(owner)["_compile"]  # Policy's is a staticmethod, the others plain methods
        function = declared.__func__ if isinstance(declared, staticmethod) else declared
        if not getattr(function, "one_at_a_time", False):
            locked = one_compile_at_a_time(function)
            owner._compile = staticmethod(locked) if isinstance(declared, staticmethod) else locked  # type: ignore[method-assign]


_compiling = threading.local()


def compile_lock_path() -> Path:
    """The lock Tianshou's compiles take: one per user of the machine."""
    return Path(tempfile.gettempdir()) / f"offline_rl-numba-{os.getuid()}.lock"


def one_compile_at_a_time(compile_: Callable[..., None]) -> Callable[..., None]:
    """`compile_` run under the machine's compile lock: a process that finds it held waits, then
    loads from numba's cache what the holder compiled instead of compiling it again."""

    @functools.wraps(compile_)
    def compiling(*args: Any) -> None:
        if getattr(_compiling, "held", False):  # a compile inside another: the lock is this thread's already
            compile_(*args)
            return
        lock = FileLock(compile_lock_path())
        lock.acquire(wait=True)
        _compiling.held = True
        try:
            compile_(*args)
        finally:
            _compiling.held = False
            lock.release()

    compiling.one_at_a_time = True  # type: ignore[attr-defined]
    return compiling


cache_tianshou_jit()


def write_buffer_hdf5(buffer: ReplayBuffer, file: Any, compression: str | None = None) -> None:
    """What Tianshou's `ReplayBuffer.save_hdf5` writes, into a file the caller opened: its body,
    so that `offline_rl.core.files.atomic_hdf5` chooses how the file is opened."""

    to_hdf5(buffer.__dict__, file, compression=compression)


def read_buffer_hdf5(buffer_class: type[ReplayBuffer], path: str) -> ReplayBuffer:
    """What Tianshou's `ReplayBuffer.load_hdf5` returns, each array read once. Tianshou reads an array
    as `np.array(dataset)`, which under numpy 1.x or h5py < 3.12 reads it and then copies it: loading
    7 GB of Atari frames peaked at 14."""

    with h5py.File(path, "r") as file:
        buffer = buffer_class.__new__(buffer_class)
        buffer.__setstate__(_hdf5_values(file))
    return buffer


def _hdf5_values(item: Any) -> Any:
    """Tianshou's `from_hdf5` on the CPU, reading arrays with `dataset[()]` (one allocation), and
    unpickling only plain values (`PlainUnpickler`): a buffer file from elsewhere never runs code."""

    if isinstance(item, h5py.Dataset):
        kind = item.attrs["__data_type__"]
        if kind == "ndarray":
            return item[()]
        if kind == "Tensor":
            return torch.from_numpy(item[()])
        return unpickle_plain(bytes(item[()]), f"{item.file.filename}: '{item.name}'")
    values = dict(item.attrs.items())
    kind = values.pop("__data_type__", None)
    for key, child in item.items():
        values[key] = _hdf5_values(child)
    return Batch(values) if kind == "Batch" else values


PLAIN_PICKLE_GLOBALS = frozenset(
    {
        # numpy arrays, scalars and dtypes (numpy 2 names its core `_core`, numpy 1 `core`)
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        # the random states Tianshou's buffers carry (`_random_state`)
        ("numpy.random._pickle", "__randomstate_ctor"),
        ("numpy.random._pickle", "__bit_generator_ctor"),
        ("numpy.random._pickle", "__generator_ctor"),
        ("numpy.random._mt19937", "MT19937"),
        ("numpy.random._pcg64", "PCG64"),
        ("numpy.random._pcg64", "PCG64DXSM"),
        ("numpy.random._philox", "Philox"),
        ("numpy.random._sfc64", "SFC64"),
        ("numpy.random.mtrand", "RandomState"),
        # plain containers that pickle through a constructor
        ("builtins", "complex"),
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "bytearray"),
        ("collections", "OrderedDict"),
    }
)
"""What a pickled value in a Tianshou buffer file may refer to: the plain values Tianshou's writer
pickles (strings, lists, None, tuples, numpy object arrays and scalars, its buffer's random state).
Anything else, a function or a class that runs code when called, is refused before it is looked up."""


class PlainUnpickler(pickle.Unpickler):
    """An unpickler that builds plain values only (`PLAIN_PICKLE_GLOBALS`)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in PLAIN_PICKLE_GLOBALS:
            raise pickle.UnpicklingError(f"refers to {module}.{name}, which a dataset may not hold")
        return super().find_class(module, name)


def unpickle_plain(data: bytes, label: str) -> Any:
    """`data` unpickled by `PlainUnpickler`; a `DatasetError` naming `label` (file and key) when it holds
    anything else, or does not unpickle at all."""

    try:
        return PlainUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as error:
        raise DatasetError(f"{label} is pickled and {first_line(error)}; only plain values are read") from None
    except Exception as error:  # damaged bytes unpickle to any error at all
        raise DatasetError(f"{label} does not unpickle ({first_line(error)})") from None


def collector_pending_obs(collector: Any) -> np.ndarray | None:
    """The observations a Tianshou `Collector`'s next `collect` acts on (each env's current one), or
    None before its first reset."""
    obs = collector._pre_collect_obs_RO
    return None if obs is None else np.asarray(obs)


def resume_collector_at(collector: Any, obs: np.ndarray) -> None:
    """Make a reset `Collector` act next on `obs`, its envs put back where a stopped run left them (the
    infos of the reset stay: a collection passes them to the policy, which the learner never reads)."""
    collector._pre_collect_obs_RO = np.asarray(obs)


def _samplers(buffer: ReplayBuffer) -> list[np.random.RandomState]:
    """The generators a Tianshou 2 buffer draws its sampled indices from (each its own, seeded when
    made): a buffer manager's, which picks the sub-buffers, then each sub-buffer's."""
    return [buffer._random_state, *(sub._random_state for sub in getattr(buffer, "buffers", []))]


def buffer_sampler_state(buffer: ReplayBuffer) -> list[dict[str, Any]]:
    """The states of the generators of `buffer`'s sampled indices, as plain values."""
    states = []
    for sampler in _samplers(buffer):
        name, keys, position, has_gauss, cached = sampler.get_state()
        states.append(
            {"name": name, "keys": np.asarray(keys).tolist(), "position": int(position)}
            | {"has_gauss": int(has_gauss), "cached_gaussian": float(cached)}
        )
    return states


def set_buffer_sampler_state(buffer: ReplayBuffer, states: list[dict[str, Any]]) -> None:
    """Put back what `buffer_sampler_state` read (a buffer of the same layout)."""
    for sampler, state in zip(_samplers(buffer), states, strict=True):
        keys = np.asarray(state["keys"], dtype=np.uint32)
        sampler.set_state((state["name"], keys, state["position"], state["has_gauss"], state["cached_gaussian"]))


def mark_buffer_full(buffer: ReplayBuffer, size: int) -> None:
    """Put `buffer` in the state Tianshou's own buffer reaches after exactly `size` adds: full,
    insertion index wrapped to 0, last index on the final transition."""
    buffer._size = size
    buffer._insertion_idx = 0
    buffer.last_index = np.array([size - 1])


def buffer_columns(buffer: ReplayBuffer) -> Batch:
    """The Batch of full-length arrays a buffer stores (its rows in slot order, not sample order)."""
    return buffer._meta


def set_buffer_columns(buffer: ReplayBuffer, columns: Batch) -> None:
    """Install `columns` as the buffer's storage without `set_batch`, which refuses keys outside
    Tianshou's reserved ones (RL Unplugged's `episode_id`, for instance)."""
    buffer._meta = columns  # type: ignore[assignment]


def set_buffer_attribute(buffer: ReplayBuffer, name: str, value: Any) -> None:
    """Attach an attribute that `ReplayBuffer.__setattr__` would refuse (it only takes its own keys);
    `save_hdf5` writes the buffer's `__dict__`, so such attributes travel with the file."""
    object.__setattr__(buffer, name, value)


def batch_of_arrays(**arrays: Any) -> Batch:
    """A `Batch` holding already-final numpy arrays (or Batches), without `Batch.__init__`'s per-key
    conversion and checks, which cost more than gathering the frames of an Atari batch."""
    batch = Batch.__new__(Batch)
    batch.__dict__.update(arrays)
    return batch


def polyak_update_(targets: list[torch.Tensor], sources: list[torch.Tensor], tau: float) -> None:
    """θ̄ ← θ̄ + τ(θ − θ̄) for every pair, as one multi-tensor kernel."""
    torch._foreach_lerp_(targets, sources, tau)


def swapped_tensors(module: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> Any:
    """A context in which `module`'s parameters and buffers named in `tensors` (dotted names) are those
    tensors: `torch.func.functional_call`'s own mechanism, for calling a method other than `forward`."""
    return torch.nn.utils.stateless._reparametrize_module(module, tensors)


def in_vmap(tensor: torch.Tensor) -> bool:
    """Whether `tensor` is one of `torch.func.vmap`'s batched tensors (torch keeps the test private)."""
    return bool(torch._C._functorch.is_batchedtensor(tensor))


def torch_optimizers(algorithm: Any) -> list[torch.optim.Optimizer]:
    """The torch optimisers inside an algorithm's registered Tianshou `Algorithm.Optimizer` wrappers
    (which keep theirs private)."""
    return [wrapped._optim for wrapped in algorithm._optimizers]


def auto_alpha_parts(alpha: AutoAlpha) -> tuple[torch.nn.Parameter, torch.optim.Optimizer, float]:
    """Tianshou's `AutoAlpha` keeps log α, its optimiser and the target entropy private; the drop-in
    `CQL` tunes that same parameter with that same optimiser, so `alpha.value` stays current."""
    return alpha._log_alpha, alpha._optim, float(alpha._target_entropy)


def importance_weights(buffer: PrioritizedReplayBuffer, indices: np.ndarray) -> np.ndarray:
    """The `weight` column `buffer[indices]` would give (divided by the batch's largest when the
    buffer normalises, its default), without assembling the rest of the batch."""
    weight = np.asarray(buffer.get_weight(indices), dtype=np.float64)
    return weight / weight.max() if buffer._weight_norm else weight


def target_update_counter(algorithm: Any) -> int:
    """How many updates a Tianshou DQN-family algorithm (`QRDQN`, ...) has made since it was built:
    it copies its target network whenever this count is a multiple of `target_update_freq`."""
    return int(algorithm._iter)


def set_target_update_counter(algorithm: Any, updates: int) -> None:
    """Give a rebuilt algorithm the count its checkpoint had, so that a resumed run copies its target
    network on the original schedule instead of at its first update."""
    algorithm._iter = int(updates)


TRAINER_HOOKS = ("_update_moving_avg_stats_and_log_update_data", "_pbar", "_training_step", "_test_step")
"""Private members of Tianshou's `Trainer` that `offline_rl.algorithms.trainer` overrides: the
per-update statistics bookkeeping, the factory of the epoch's progress bar, and the training and
evaluation steps a stop waits between (`StopsBetweenSteps`)."""


COMPILER_NOTICES = {
    "torch._dynamo.variables.ctx_manager": "Profiler record function ",
    "torch._inductor.compile_fx": "TensorFloat32 tensor cores for float32 matrix multiplication available",
}
"""torch.compile's notices that a run's user can do nothing about, by the module that issues them and
how they start: Adam's step carries a profiler label that the compiled step drops (a warning line at
every CUDA run's start), and inductor suggests TF32 wherever a run has float32 products (the run's own
`updates:` line names `--matmul-precision high` instead)."""


class _DropNotice:
    def __init__(self, start: str) -> None:
        self.start = start

    def filter(self, record: Any) -> bool:
        return not str(record.msg).startswith(self.start)


def quiet_compiler_notices() -> None:
    """Drop those notices (whether torch logs or warns them), and nothing else those modules say."""

    for module, start in COMPILER_NOTICES.items():
        logger = logging.getLogger(module)
        if not any(isinstance(existing, _DropNotice) and existing.start == start for existing in logger.filters):
            logger.addFilter(_DropNotice(start))
        warnings.filterwarnings("ignore", message=re.escape(start), category=UserWarning)
