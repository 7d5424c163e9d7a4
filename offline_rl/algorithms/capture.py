"""A whole gradient step replayed as one CUDA graph.

Why: one CQL-SAC update is a few hundred small kernels. Launched one by one from Python, the GPU
waits for the host most of the time.
Recorded once and replayed, the same kernels run back to back with a single launch.

What a captured step may do: read and write tensors that already exist (parameters, optimiser
state, the staged dataset, a statistics accumulator), draw random numbers on the device, allocate
temporaries. What it may not do: read a tensor's value on the host, change shapes, or depend on
host-side state that changes between updates; the algorithm checks those conditions before it asks
for a capture, and runs eagerly otherwise.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable, Iterable

import torch

WARMUP_STEPS = 3
"""Eager steps (on a side stream, as PyTorch's capture recipe asks) before the capture; they are
real updates: the optimisers' state, cuBLAS workspaces and the allocator are initialised by them."""


def make_optimizers_capturable(optimizers: Iterable[torch.optim.Optimizer]) -> None:
    """Mark optimisers as replayable (their step counts already live on the device for fused Adam)."""
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            group["capturable"] = True
        # Our warm-up steps run uncaptured on purpose; torch's advice against that does not apply.
        optimizer._warned_capturable_if_run_uncaptured = True  # type: ignore[attr-defined]


def use_multi_tensor_kernels(optimizers: Iterable[torch.optim.Optimizer], enabled: bool) -> None:
    """Step with the multi-tensor (`foreach`) implementation when torch.compile compiles the steps,
    else with the implementation each optimiser was built with (offline_rl's: fused).

    Why: torch's fused Adam gives each 65 536-element chunk of a tensor one thread block, so the few
    tensors of these networks keep a handful of a GPU's multiprocessors busy (the largest kernel of an
    update after the critics' products). Inductor compiles the multi-tensor
    implementation into kernels spread over every element instead. Uncompiled, fused is faster.
    The choice belongs to the run, not to the optimiser's state; `state_dict()` carries it anyway,
    so `CountedOfflineAlgorithm.load_state_dict` puts the built implementation back.
    """
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            group["fused"] = False if enabled else optimizer.defaults.get("fused")
            group["foreach"] = True if enabled else optimizer.defaults.get("foreach")


class CapturedStep:
    """`step()` run eagerly `WARMUP_STEPS` times, then recorded and replayed on every call.

    `key` names what the recording depends on (the staged dataset, the batch size...): a step with
    another key needs a new `CapturedStep`.
    """

    def __init__(self, step: Callable[[], None], key: Hashable) -> None:
        self.step = step
        self.key = key
        self._warmups_left = WARMUP_STEPS
        self._graph: torch.cuda.CUDAGraph | None = None
        self._side_stream = torch.cuda.Stream()

    @property
    def captured(self) -> bool:
        return self._graph is not None

    def __call__(self) -> bool:
        """One step; True when it was a replay only (the step's Python did not run)."""
        if self._graph is not None:
            self._graph.replay()
            return True
        if self._warmups_left > 0:
            self._warmups_left -= 1
            self._side_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self._side_stream):
                self.step()
            torch.cuda.current_stream().wait_stream(self._side_stream)
            return False
        graph = torch.cuda.CUDAGraph()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's notes about the graph's private memory pool
            with torch.cuda.graph(graph):
                self.step()  # recorded, not run: the replay below performs this update
        self._graph = graph
        graph.replay()
        return False  # the recording ran the step's Python once, for this very update
