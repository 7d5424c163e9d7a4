"""What both offline algorithms share, written once: the update counter, the device, the timed
`update()` wrapper, the choice between an eager and a captured (CUDA graph) gradient step, and
training statistics derived from their dataclass declaration, summed on the device and read once
per logging window."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

import numpy as np
import torch
from tianshou.algorithm.algorithm_base import OfflineAlgorithm, TrainingStats
from tianshou.data import ReplayBuffer
from tianshou.utils.torch_utils import torch_train_mode

from offline_rl.data.staging import buffer_fingerprint
from offline_rl.errors import TrainingDiverged

Stats = TypeVar("Stats", bound=TrainingStats)
PolicyT = TypeVar("PolicyT")


@functools.cache
def stat_names(stats_class: type[TrainingStats]) -> tuple[str, ...]:
    """The figures a statistics dataclass declares (beyond Tianshou's own timing fields)."""
    inherited = {field.name for field in dataclasses.fields(TrainingStats)}
    return tuple(field.name for field in dataclasses.fields(stats_class) if field.name not in inherited)


def stat_vector(stats_class: type[TrainingStats], values: dict[str, torch.Tensor]) -> torch.Tensor:
    """The declared figures, in declaration order, as one device vector (from 0-d tensors by name)."""
    return torch.stack([values[name].detach().reshape(()).float() for name in stat_names(stats_class)])


def stats_from_numbers(stats_class: type[Stats], numbers: list[float]) -> Stats:
    return stats_class(**dict(zip(stat_names(stats_class), numbers, strict=True)))


def stats_from_tensors(stats_class: type[Stats], values: dict[str, torch.Tensor]) -> Stats:
    """Build the statistics from 0-d tensors keyed by the declared names, in one device-to-host copy."""
    return stats_from_numbers(stats_class, stat_vector(stats_class, values).tolist())


def unlogged_stats(stats_class: type[Stats]) -> Stats:
    """Statistics before the first window closes: NaN, which Tianshou's moving averages skip (they
    compare against `np.nan` itself, so it must be that object)."""
    return stats_class(**dict.fromkeys(stat_names(stats_class), np.nan))


class StatisticsWindow(Generic[Stats]):
    """Per-update statistics summed on the device and read on the host once every `interval` updates.

    Why: reading a number computed on a GPU waits for every kernel queued before it, so reading the
    statistics of every update would stop the host from running ahead of the device. Windows are
    aligned to the run's update count (updates `k·interval + 1 … (k+1)·interval`), so a resumed run
    logs at the same steps as an uninterrupted one; the figures of a window are its mean.
    """

    def __init__(self, stats_class: type[Stats], interval: int = 1) -> None:
        self.stats_class = stats_class
        self.interval = interval
        self._sum: torch.Tensor | None = None
        self._count = 0
        self.latest: Stats = unlogged_stats(stats_class)
        self.fresh = False

    def add(self, values: dict[str, torch.Tensor]) -> None:
        """Add one update's figures to the sum (device work only; may run inside a CUDA graph)."""
        vector = stat_vector(self.stats_class, values)
        if self._sum is None:
            self._sum = torch.zeros_like(vector)
        self._sum.add_(vector)

    def count(self, updates_done: int) -> Stats:
        """Count one update on the host; at the end of a window read the mean in one transfer. Returns
        a fresh statistics object (Tianshou's trainer writes into it) with the latest window's mean."""
        self._count += 1
        if updates_done % self.interval == 0 and self._sum is not None:
            numbers = (self._sum / self._count).tolist()
            first = updates_done - self._count + 1
            self._sum.zero_()
            self._count = 0
            require_finite_statistics(stat_names(self.stats_class), numbers, first, updates_done)
            self.latest = stats_from_numbers(self.stats_class, numbers)
            self.fresh = True
        return dataclasses.replace(self.latest)

    def take_fresh(self) -> bool:
        """Whether a window closed since the last call (the logger writes only those)."""
        fresh, self.fresh = self.fresh, False
        return fresh


def require_finite_statistics(names: Sequence[str], numbers: Sequence[float], first: int, last: int) -> None:
    """Stop at the first window whose figures hold a NaN or an infinity (`TrainingDiverged`).

    Why here: the window's figures are already on the host, so the check costs nothing, and it runs
    every `--log-interval` updates rather than after hours of updates on NaN weights."""
    bad = [f"{name} {value}" for name, value in zip(names, numbers, strict=True) if not math.isfinite(value)]
    if bad:
        span = f"update {last}" if first == last else f"updates {first}-{last}"
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        raise TrainingDiverged(f"training diverged: {', '.join(bad[:3])}{more} (mean of {span})")


def non_finite_tensors(module: torch.nn.Module) -> list[str]:
    """The names of `module`'s floating-point parameters and buffers holding a NaN or +inf, read in
    one device-to-host transfer. (−inf is allowed: log α = −inf is how α = 0 is stored.)"""
    named = [
        (name, tensor)
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]
        if tensor.is_floating_point()
    ]
    if not named:
        return []
    broken = torch.stack([(tensor.isnan() | tensor.isposinf()).any() for _, tensor in named]).tolist()
    return [name for (name, _), bad in zip(named, broken, strict=True) if bad]


def compiler_failure(error: BaseException) -> str:
    """Why torch.compile failed, in one line: the first line of the error that says something (torch
    heads a backend's error with `backend='inductor' raised:`, which names no cause)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return next((line for line in lines if not line.endswith("raised:")), type(error).__name__)


class CountedOfflineAlgorithm(OfflineAlgorithm[PolicyT], Generic[PolicyT]):  # type: ignore[type-var]
    """A Tianshou `OfflineAlgorithm` that counts its updates in its state (so checkpoints restore the
    count) while keeping a host-side mirror (reading the device copy each update would sync).

    Subclasses declare their statistics class (`STATS`) and run each update through `run_step`,
    which replays it as a CUDA graph when `capture` allows and the subclass's
    `capture_blocker()` finds nothing in the way.
    """

    STATS: type[TrainingStats] = TrainingStats

    def __init__(self, *, policy: Any) -> None:
        super().__init__(policy=policy)
        self.register_buffer("num_updates", torch.zeros((), dtype=torch.long))
        self._host_updates = 0
        self.capture: bool | None = None
        """Capture the update as a CUDA graph: None (the default) on CUDA, False never, True on CUDA."""
        self.compile_update = True
        """With a capture, first fuse the update's kernels with `torch.compile` (measured faster on an
        H100): the losses, and the optimiser steps where the subclass names them (`OPTIMIZER_STEPS`)."""
        self.compile_optimizer_steps = True
        """Whether `compile_update` includes the optimiser steps (a switch for benchmarks)."""
        self.statistics = StatisticsWindow(self.STATS)
        self._captured: Any = None  # offline_rl.cuda_graphs.CapturedStep, imported when first needed
        self._staged: Any = None  # what `staged` prepared from the current buffer (or why it could not)
        self._staged_key: tuple[Any, ...] | None = None

    @property
    def device(self) -> torch.device:
        return self.num_updates.device

    @property
    def statistics_interval(self) -> int:
        return self.statistics.interval

    @statistics_interval.setter
    def statistics_interval(self, interval: int) -> None:
        """Read the statistics every `interval` updates (the run's --log-interval)."""
        self.statistics.interval = interval

    def staged(self, buffer: ReplayBuffer, build: Callable[[], Any]) -> Any:
        """What `build()` prepares from `buffer` for sampling on the device, kept until another
        buffer, new transitions or another device call for a new one (the old one is released
        first, so two copies never coexist)."""
        key = (*buffer_fingerprint(buffer), self.device)
        if self._staged_key != key:
            self._staged = self._staged_key = None
            self._staged = build()
            self._staged_key = key
        return self._staged

    def process_buffer(self, buffer: ReplayBuffer) -> ReplayBuffer:
        """Tianshou's trainer calls this at the start of every run: stage afresh, so that edits made
        to the buffer between runs are seen."""
        self._staged = self._staged_key = None
        return buffer

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        from offline_rl.cuda_graphs import use_multi_tensor_kernels

        result = super().load_state_dict(state_dict, strict=strict, assign=assign)
        self._host_updates = int(self.num_updates)
        self._captured = None  # the optimisers' state tensors were replaced: record afresh
        # The checkpoint carried the kernels its run stepped with; this run chooses its own.
        use_multi_tensor_kernels(self.capturable_optimizers(), False)
        return result

    # ----------------------------------------------------------------------------------------
    # eager or captured
    def capture_blocker(self) -> str | None:
        """Why the update cannot be captured now, or None. Subclasses add their own reasons."""
        if self.capture is False:
            return "--no-compile"
        if self.device.type != "cuda":
            return f"the device is {self.device.type}; CUDA graphs need CUDA"
        if self.lr_schedulers:
            return "a learning-rate scheduler changes the optimiser between updates"
        if not all(optimizer.defaults.get("fused") for optimizer in self.capturable_optimizers()):
            return "optimisers from Tianshou factories (the capture needs offline_rl's fused Adam)"
        return None

    def capturable_optimizers(self) -> Sequence[torch.optim.Optimizer]:
        """Every optimiser the captured step steps (they are made capturable before the capture)."""
        from offline_rl.compat import torch_optimizers

        return torch_optimizers(self)

    def update_path(self) -> str:
        """One line for the start of a run: how updates will execute, and why."""
        blocker = self.capture_blocker()
        if blocker is None:
            parts = "losses and optimiser steps" if len(self._compiled_parts()) > 1 else "losses"
            fused = f", {parts} fused by torch.compile" if self.compile_update else ""
            precision = {
                "highest": "; float32 products (--matmul-precision high: TF32, ~1.4x faster on an H100)",
                "high": "; TF32 products (--matmul-precision highest: float32)",
            }.get(torch.get_float32_matmul_precision(), "")
            return f"updates: captured as one CUDA graph{fused}, replayed each step (--no-compile: eager){precision}"
        line = f"updates: eager ({blocker})"
        if self.device.type == "cpu" and any(getattr(m, "USES_CPU_PRODUCTS", False) for m in self.modules()):
            from offline_rl.cpu_products import bf16_products_hint, describe_cpu_products

            line += f"; {describe_cpu_products()}"
            if any(getattr(m, "BF16_PRODUCTS_GAIN", False) for m in self.modules()):
                line += bf16_products_hint()
        return line

    def run_step(self, step: Callable[[], dict[str, torch.Tensor]], key: Hashable, *, eager: bool = False) -> Any:
        """Run one update, `step()` returning its device statistics, eagerly or as a replayed graph;
        returns the statistics object for Tianshou's trainer. `key` names what a recording depends on;
        `eager` forces this update to run uncaptured (e.g. during a warm-up phase with other losses)."""
        if eager or self.capture_blocker() is not None:
            self.statistics.add(step())
        else:
            if self._captured is None or self._captured.key != key:
                from offline_rl.cuda_graphs import CapturedStep, make_optimizers_capturable

                self._captured = None  # release the old recording's memory first
                make_optimizers_capturable(self.capturable_optimizers())
                if self.compile_update:
                    self._compile_update()
                self._captured = CapturedStep(lambda: self.statistics.add(step()), key)
            try:
                replayed = self._captured()
            except Exception as error:  # any compiler failure: say so, capture uncompiled
                if not self.compile_update or self._captured.captured:
                    raise
                self._give_up_compiling(error)
                return self.run_step(step, key, eager=eager)
            if replayed:  # a replay: the step's Python (and its host-side counting) did not run
                self._host_updates += 1
        return self.statistics.count(self._host_updates)

    LOSSES = "compute_losses"
    """The method `torch.compile` fuses first (the whole forward computation of an update)."""
    OPTIMIZER_STEPS: str | None = None
    """The method that steps every optimiser after the backward pass, if a subclass has one to fuse."""

    def _compiled_parts(self) -> list[str]:
        steps = self.OPTIMIZER_STEPS if self.compile_optimizer_steps else None
        return [name for name in (self.LOSSES, steps) if name is not None]

    def _compile_update(self) -> None:
        """Compile the update's methods (once per instance), and step the optimisers with the
        kernels that compiled steps need."""
        from offline_rl.compat import quiet_compiler_notices
        from offline_rl.cuda_graphs import use_multi_tensor_kernels

        quiet_compiler_notices()
        for name in self._compiled_parts():
            if name not in vars(self):  # not yet compiled on this instance
                setattr(self, name, torch.compile(getattr(self, name), dynamic=False))
        use_multi_tensor_kernels(self.capturable_optimizers(), self.OPTIMIZER_STEPS in self._compiled_parts())

    def _give_up_compiling(self, error: Exception) -> None:
        """Compilation happens at the first call, before anything is computed: nothing to undo but
        the compiled methods and the kernels chosen for them."""
        from offline_rl.cuda_graphs import use_multi_tensor_kernels

        for name in (self.LOSSES, self.OPTIMIZER_STEPS):
            if name is not None:
                vars(self).pop(name, None)
        use_multi_tensor_kernels(self.capturable_optimizers(), False)
        self.compile_update = False
        self._captured = None
        print(
            f"updates: torch.compile failed ({compiler_failure(error)[:160]}); capturing the uncompiled update instead"
        )

    def count_update(self) -> int:
        """Advance the counter after a gradient step; returns the new count (from the host mirror)."""
        with torch.no_grad():
            self.num_updates += 1
        self._host_updates += 1
        return self._host_updates

    def update(self, buffer: ReplayBuffer, sample_size: int | None) -> Any:
        """One gradient step from `buffer`, timed, inside Tianshou's training-step contract."""
        if not self.policy.is_within_training_step:
            raise RuntimeError("update() must run inside a training step (see policy_within_training_step)")
        start = time.time()
        with self._training_mode():
            stats = self.update_from_buffer(buffer, sample_size)
        for scheduler in self.lr_schedulers:
            scheduler.step()
        stats.train_time = time.time() - start
        return stats

    def _training_mode(self) -> contextlib.AbstractContextManager[Any]:
        """Tianshou's `torch_train_mode` (every module in training mode, the previous modes restored
        afterwards), skipped when every module already trains, as between evaluations: it sets the
        mode of each of ~30 modules twice per update, ~90% of the host's own time per captured update."""
        if all(module.training for module in self.modules()):
            return contextlib.nullcontext()
        return torch_train_mode(self)

    def create_trainer(self, params: Any) -> Any:
        """Tianshou's offline trainer, feeding its moving averages and the logger once per statistics
        window (`offline_rl.trainer`). On a CPU, training also keeps freed memory in the process's heap
        (`offline_rl.perf.tune_cpu_allocator`, as the examples do): without it a CQL-SAC update took
        ~10 000 page faults and ran 12-20% slower, and a script calling `run_training` itself (a
        Tianshou script with the drop-ins) would have gone without."""
        from offline_rl import perf
        from offline_rl.trainer import WindowedOfflineTrainer

        if self.device.type == "cpu":
            perf.tune_cpu_allocator()
        return WindowedOfflineTrainer(self, params)

    def update_from_buffer(self, buffer: ReplayBuffer, sample_size: int | None) -> Any:
        """The algorithm's own step: draw a batch of `sample_size` from `buffer` and learn from it."""
        raise NotImplementedError
