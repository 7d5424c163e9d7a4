"""The engine both offline algorithms stand on, written once, so that an algorithm's module holds its
mathematics and nothing else.

An algorithm gives the engine four things: its statistics class (`STATS`), what it stages from a buffer
(`stage`), its losses on a batch (`compute_losses`, the one contract: a `Losses`), and what it does after
the backward pass (`apply_gradients`). An update whose later losses must see the parameters its earlier
steps left (TD3's actor against the critics just updated) lists its stages in `STAGES`, each such a
pair. The engine does the rest:

- the update counter, kept in the algorithm's state (checkpoints restore it) with a host-side mirror
  (reading the device copy each update would wait for the device);
- the staged dataset, built once per buffer and device (`staged`) and released before another is built;
- one gradient step (`gradient_step`): per stage, losses, one backward pass over their sum, the
  algorithm's optimiser steps; then the count;
- running it eagerly or as a replayed CUDA graph (`run_step`; one recording per phase of the update,
  such as a delayed actor's), with the losses and the optimiser steps first fused by `torch.compile`
  where that is switched on (`compile_update`);
- a prioritized buffer's path (`prioritized_step`): indices drawn by priority on the host, the TD loss
  weighted by the importance weights, new priorities given back;
- statistics windows, checkpoint keys renamed since (`LEGACY_KEYS`), and Tianshou's trainer.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any, ClassVar, Generic, NamedTuple, TypeVar

import numpy as np
import torch
from tianshou.algorithm.algorithm_base import OfflineAlgorithm, TrainingStats
from tianshou.algorithm.optim import OptimizerFactory
from tianshou.data import ReplayBuffer
from tianshou.utils.torch_utils import torch_train_mode

from offline_rl.algorithms.capture import CapturedStep, make_optimizers_capturable, use_multi_tensor_kernels
from offline_rl.algorithms.layers import bf16_products_hint, describe_cpu_products
from offline_rl.algorithms.staging import buffer_fingerprint
from offline_rl.algorithms.trainer import WindowedOfflineTrainer
from offline_rl.algorithms.training_stats import StatisticsWindow
from offline_rl.core import resources
from offline_rl.core.compat import importance_weights, quiet_compiler_notices, torch_optimizers
from offline_rl.core.errors import OfflineRLError

log = logging.getLogger(__name__)

PolicyT = TypeVar("PolicyT")

MAX_RECORDINGS = 4
"""Recordings kept at once: an update's phases (a delayed actor's steps and the others) each have one;
a key beyond these (another dataset, another batch size) releases them all first."""


class Losses(NamedTuple):
    """What `compute_losses` gives for one batch."""

    parts: dict[str, torch.Tensor]
    """The losses, each touching its own parameters: one backward pass differentiates their sum."""
    figures: dict[str, torch.Tensor]
    """Detached 0-d figures, by the names the algorithm's statistics class declares."""
    priority: torch.Tensor | None = None
    """Per sample: the new priorities a prioritized buffer is given (|TD error|-like), when there are any."""


def make_adam(parameters: Any, **kwargs: Any) -> torch.optim.Adam:
    """Adam as one fused kernel per step where this torch build has it, else multi-tensor: the same
    update rule as torch's default implementation, other kernels."""
    parameters = list(parameters)
    try:
        return torch.optim.Adam(parameters, fused=True, **kwargs)
    except (RuntimeError, ValueError):
        return torch.optim.Adam(parameters, foreach=True, **kwargs)


def compiler_failure(error: BaseException) -> str:
    """Why torch.compile failed, in one line: the first line of the error that says something (torch
    heads a backend's error with `backend='inductor' raised:`, which names no cause)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return next((line for line in lines if not line.endswith("raised:")), type(error).__name__)


class CountedOfflineAlgorithm(OfflineAlgorithm[PolicyT], Generic[PolicyT]):  # type: ignore[type-var]
    """A Tianshou `OfflineAlgorithm` on offline_rl's engine; see the module docstring for the contract."""

    STATS: type[TrainingStats] = TrainingStats
    STAGES: ClassVar[tuple[tuple[str, str], ...]] = (("compute_losses", "apply_gradients"),)
    """The update's stages in order, each (the method giving its `Losses`, the method stepping after its
    backward pass). A stage whose losses are empty this update (a delayed actor's) is skipped."""
    SEED_BUFFERS: ClassVar[tuple[str, ...]] = ()
    """Buffers the losses write, which a seed batch (`offline_rl.algorithms.seeds`) keeps one row of per
    seed; every other buffer holding equal values in all seeds is shared."""
    LEGACY_KEYS: ClassVar[dict[str, str]] = {}
    """State-dict keys renamed since checkpoints were first written: old name -> current name."""

    def __init__(self, *, policy: Any) -> None:
        super().__init__(policy=policy)
        self.register_buffer("num_updates", torch.zeros((), dtype=torch.long))
        self._host_updates = 0
        self.capture: bool | None = None
        """Capture the update as a CUDA graph: None (the default) on CUDA, False never, True on CUDA."""
        self.compile_update = True
        """With a capture, first fuse the losses (and the optimiser steps) with `torch.compile`."""
        self.compile_optimizer_steps = True
        """Whether `compile_update` includes the optimiser steps (a switch for benchmarks)."""
        self.statistics = StatisticsWindow(self.STATS)
        self._captured: dict[Hashable, CapturedStep] = {}  # one recording per phase of the update
        self._compiled: bool | None = None  # None: uncompiled; else whether the optimiser steps are compiled too
        self._staged: Any = None  # what `stage` prepared from the current buffer (or why it could not)
        self._staged_key: tuple[Any, ...] | None = None
        self.seed_batch: Any = None  # the `seeds.SeedBatch` whose stacked copy this is: its updates are the batch's
        self.batched_in: Any = None  # the `SeedBatch` this is one seed of: its tensors are rows of the batch's

    # ----------------------------------------------------------------------------------------
    # what an algorithm provides
    def stage(self, buffer: ReplayBuffer) -> Any:
        """What the updates sample from, prepared once from `buffer` on the algorithm's device."""
        raise NotImplementedError

    def compute_losses(self, batch: Any, *, weight: torch.Tensor | None = None, **options: Any) -> Losses:
        """The losses of one batch (`weight`: a prioritized buffer's importance weights per sample).
        `options` are the algorithm's own `loss_options()`, passed as plain values because
        `torch.compile` specialises on what it reads."""
        raise NotImplementedError

    def apply_gradients(self) -> None:
        """After the backward pass: step every optimiser this configuration trains, and the targets."""
        raise NotImplementedError

    def stepped_optimizers(self) -> Sequence[torch.optim.Optimizer]:
        """The optimisers `apply_gradients` steps (their gradients are cleared before each backward pass)."""
        return torch_optimizers(self)

    def loss_options(self) -> dict[str, Any]:
        """Plain values the losses depend on beyond the batch (a warm-up phase, a constant of the
        staged data), passed to `compute_losses` and part of what a captured update depends on."""
        return {}

    def plan(self, total_updates: int) -> None:
        """The run's length in updates (Tianshou's `max_epochs` × `epoch_num_steps`: the programs'
        `--epoch` × `--step-per-epoch`), told when its trainer is made, for what spans a run (IQL's
        cosine schedule of the actor's rate); nothing by default."""

    def add_optimizer(
        self, module: torch.nn.Module, factory: OptimizerFactory | None, **adam: Any
    ) -> torch.optim.Optimizer:
        """The optimiser of `module`'s parameters: offline_rl's fused Adam (`adam`: its arguments), or
        one a Tianshou factory makes (with its learning-rate scheduler); registered with Tianshou, so that
        `state_dict()` carries its state."""
        if factory is None:
            optimizer = make_adam(module.parameters(), **adam)
        else:
            optimizer, scheduler = factory.create_instances(module)
            if scheduler is not None:
                self.lr_schedulers.append(scheduler)
        self._optimizers.append(OfflineAlgorithm.Optimizer(optimizer, module))
        return optimizer

    # ----------------------------------------------------------------------------------------
    # counting, state
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

    def count_update(self) -> int:
        """Advance the counter after a gradient step; returns the new count (from the host mirror)."""
        with torch.no_grad():
            self.num_updates += 1
        self._host_updates += 1
        return self._host_updates

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        """Also reads checkpoints written before a key was renamed (`LEGACY_KEYS`). A member of a seed
        batch loads its row, and the batch stacks the optimisers' state again."""
        if any(old in state_dict for old in self.LEGACY_KEYS):
            state_dict = {self.LEGACY_KEYS.get(key, key): value for key, value in state_dict.items()}
        result = super().load_state_dict(state_dict, strict=strict, assign=assign)
        self._host_updates = int(self.num_updates)
        self._captured = {}  # the optimisers' state tensors were replaced: record afresh
        # The checkpoint carried the kernels its run stepped with; this run chooses its own.
        use_multi_tensor_kernels(self.capturable_optimizers(), False)
        if self.batched_in is not None:
            self.batched_in.bind()
        return result

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        """Tianshou's (networks, buffers, optimisers' state). A member of a seed batch gives its own row,
        copied out of the batch's tensors, and its own slice of the optimisers' state: what a single run
        with its seed would save, and resumes from."""
        if self.batched_in is None:
            return super().state_dict(*args, **kwargs)
        self.batched_in.write_optimizer_rows(self)
        state = super().state_dict(*args, **kwargs)
        return {key: value.clone() if isinstance(value, torch.Tensor) else value for key, value in state.items()}

    # ----------------------------------------------------------------------------------------
    # data
    def staged(self, buffer: ReplayBuffer) -> Any:
        """`stage(buffer)`, kept until another buffer, new transitions or another device call for a new
        one (the old one is released first, so two copies never coexist)."""
        key = (*buffer_fingerprint(buffer), self.device)
        if self._staged_key != key:
            self._staged = self._staged_key = None
            self._staged = self.stage(buffer)
            self._staged_key = key
        return self._staged

    def process_buffer(self, buffer: ReplayBuffer) -> ReplayBuffer:
        """Tianshou's trainer calls this at the start of every run: stage afresh, so that edits made
        to the buffer between runs are seen."""
        self._staged = self._staged_key = None
        self.staged(buffer)
        return buffer

    # ----------------------------------------------------------------------------------------
    # one update
    def gradient_step(self, batch: Any, weight: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Per stage: losses, one backward pass over their sum, the optimiser steps; then the count.
        Returns the detached figures (and `priority`, for a prioritized buffer)."""
        options = self.loss_options()
        figures: dict[str, torch.Tensor] = {}
        for losses_method, apply_method in self.STAGES:
            losses = getattr(self, losses_method)(batch, weight=weight, **options)
            figures.update(losses.figures)
            if losses.priority is not None:
                figures["priority"] = losses.priority
            if not losses.parts:
                continue
            for optim in self.stepped_optimizers():
                optim.zero_grad(set_to_none=True)
            sum(losses.parts.values()).backward()  # type: ignore[union-attr]
            getattr(self, apply_method)()
        self.count_update()
        return figures

    def sampled_step(self, draw: Callable[[int], Any], batch_size: int, key: Hashable, *, eager: bool = False) -> Any:
        """One update on the batch `draw(batch_size)` draws on the device, replayed as a graph where it
        can be; `key` names what the batches depend on (the staged data). A seed batch's stacked copy
        draws a batch for every seed (`offline_rl.algorithms.seeds`)."""
        if self.seed_batch is not None:
            return self.seed_batch.sampled_step(draw, batch_size, key, eager=eager)
        step = lambda: self.gradient_step(draw(batch_size))  # noqa: E731
        return self.run_step(step, (key, batch_size, *self.loss_options().values()), eager=eager)

    def prioritized_step(self, buffer: ReplayBuffer, batch_size: int, batch_at: Callable[[np.ndarray], Any]) -> Any:
        """One update on indices drawn by the buffer's priorities (on the host, so never captured): the
        TD loss weighted by their importance weights, and the losses' `priority` given back to them."""

        if self.seed_batch is not None:
            raise OfflineRLError("--num-seeds: a prioritized buffer draws one batch at a time; train seeds apart")

        def step() -> dict[str, torch.Tensor]:
            indices = buffer.sample_indices(batch_size)
            weights = importance_weights(buffer, indices)  # type: ignore[arg-type]
            figures = self.gradient_step(
                batch_at(indices), weight=torch.as_tensor(weights, dtype=torch.float32, device=self.device)
            )
            buffer.update_weight(indices, figures["priority"].cpu().numpy())  # type: ignore[attr-defined]
            return figures

        return self.run_step(step, None, eager=True)

    def update(self, buffer: ReplayBuffer, sample_size: int | None) -> Any:
        """One gradient step from `buffer`, timed, inside Tianshou's training-step contract."""
        if not self.policy.is_within_training_step:
            raise RuntimeError("update() must run inside a training step (see policy_within_training_step)")
        if self.batched_in is not None:
            raise RuntimeError("a member of a seed batch trains through the batch's stacked copy")
        start = time.time()
        with self._training_mode():
            stats = self.update_from_buffer(buffer, sample_size)
        for scheduler in self.lr_schedulers:
            scheduler.step()
        stats.train_time = time.time() - start
        return stats

    def update_from_buffer(self, buffer: ReplayBuffer, sample_size: int | None) -> Any:
        """The algorithm's own step: draw a batch of `sample_size` from `buffer` and learn from it."""
        raise NotImplementedError

    def _training_mode(self) -> contextlib.AbstractContextManager[Any]:
        """Tianshou's `torch_train_mode` (every module in training mode, the previous modes restored
        afterwards), skipped when every module already trains, as between evaluations: it sets the
        mode of each of some thirty modules twice per update, most of the host's time per captured update."""
        if all(module.training for module in self.modules()):
            return contextlib.nullcontext()
        return torch_train_mode(self)

    def create_trainer(self, params: Any) -> Any:
        """Tianshou's offline trainer, feeding its moving averages and the logger once per statistics
        window (`offline_rl.algorithms.trainer`), the run's length told to `plan`. On a CPU, training
        also keeps freed memory in the process's heap (`resources.tune_cpu_allocator`), so a script
        calling `run_training` itself (a Tianshou script with the drop-ins) trains as fast as the
        examples do."""
        if self.device.type == "cpu":
            resources.tune_cpu_allocator()
        self.plan(int(params.max_epochs) * int(params.epoch_num_steps))
        return WindowedOfflineTrainer(self, params)

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
        return torch_optimizers(self)

    def update_path(self) -> str:
        """One line for the start of a run: how updates will execute, and why."""
        blocker = self.capture_blocker()
        if blocker is None:
            parts = "losses and optimiser steps" if self.compile_optimizer_steps else "losses"
            fused = f", {parts} fused by torch.compile" if self.compile_update else ""
            precision = {
                "highest": "; float32 products (--matmul-precision high: TF32, faster on tensor cores)",
                "high": "; TF32 products (--matmul-precision highest: float32)",
            }.get(torch.get_float32_matmul_precision(), "")
            return f"updates: captured as one CUDA graph{fused}, replayed each step (--no-compile: eager){precision}"
        line = f"updates: eager ({blocker})"
        if self.device.type == "cpu" and any(getattr(m, "USES_CPU_PRODUCTS", False) for m in self.modules()):
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
            captured = self._captured.get(key)
            if captured is None:
                if len(self._captured) >= MAX_RECORDINGS:
                    self._captured = {}  # another dataset or batch size: release the old recordings first
                make_optimizers_capturable(self.capturable_optimizers())
                if self.compile_update:
                    self._compile_update()
                captured = self._captured[key] = CapturedStep(lambda: self.statistics.add(step()), key)
            try:
                replayed = captured()
            except Exception as error:  # any compiler failure: say so, capture uncompiled
                if not self.compile_update or captured.captured:
                    raise
                self._give_up_compiling(error)
                return self.run_step(step, key, eager=eager)
            if replayed:  # a replay: the step's Python (and its host-side counting) did not run
                self._host_updates += 1
        return self.statistics.count(self._host_updates)

    def _compile_update(self) -> None:
        """Fuse the losses, and the optimiser steps where switched on, with `torch.compile` (once per
        instance, as attributes that shadow the class's methods), and step the optimisers with the
        kernels compiled steps need."""
        quiet_compiler_notices()
        if self._compiled is None:
            for losses_method, apply_method in self.STAGES:
                setattr(self, losses_method, torch.compile(getattr(self, losses_method), dynamic=False))
                if self.compile_optimizer_steps:
                    setattr(self, apply_method, torch.compile(getattr(self, apply_method), dynamic=False))
            self._compiled = self.compile_optimizer_steps
        use_multi_tensor_kernels(self.capturable_optimizers(), self.compile_optimizer_steps)

    def _give_up_compiling(self, error: Exception) -> None:
        """Compilation happens at the first call, before anything is computed: nothing to undo but
        the compiled functions (the class's methods show again) and the kernels chosen for them."""
        if self._compiled is not None:
            for losses_method, apply_method in self.STAGES:
                delattr(self, losses_method)
                if self._compiled:
                    delattr(self, apply_method)
            self._compiled = None
        use_multi_tensor_kernels(self.capturable_optimizers(), False)
        self.compile_update = False
        self._captured = {}
        log.info(
            f"updates: torch.compile failed ({compiler_failure(error)[:160]}); capturing the uncompiled update instead"
        )
