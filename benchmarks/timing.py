"""Timing helper shared by the throughput benchmarks."""

from __future__ import annotations

import offline_rl  # noqa: F401  first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

import argparse
import math
import time
from typing import Any

import torch
from tianshou.algorithm.algorithm_base import policy_within_training_step
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from offline_rl.algorithms.layers import describe_cpu_products, use_cpu_products


def products_of(path: str) -> str:
    """The library of our networks' CPU products on a benchmark path: `eager-blas` is the eager path
    with torch's BLAS (`--cpu-products blas`), every other path uses oneDNN (`--cpu-products onednn`,
    the default on AMD processors)."""
    return "blas" if path == "eager-blas" else "onednn"


CPU_PATHS = ("eager", "eager-blas")
"""Our update paths that run as named on a CPU; the others (captured, compiled, host-fed) are compiled
and replayed as a CUDA graph on a GPU, and on a CPU would only run eagerly under another name."""


def refuse_cuda_only_paths(parser: argparse.ArgumentParser, paths: list[str], device: str) -> None:
    """Exit with a usage error naming the paths a CPU cannot run as named (by their base, before any
    '+form'), rather than time an eager update under a compiled path's name."""
    refused = [] if device == "cuda" else [path for path in paths if path.partition("+")[0] not in CPU_PATHS]
    if refused:
        parser.error(f"--paths {','.join(refused)}: CUDA only (on a CPU the update runs eagerly)")


def updates_per_second(
    algorithm: Any,
    buffer: Any,
    batch_size: int,
    updates: int,
    device: str,
    warmup: int = 5,
    *,
    cpu_products: str = "onednn",
) -> float:
    """Gradient updates per second through `algorithm.update(buffer, batch_size)`, as Tianshou's
    offline trainer calls it; CUDA work is synchronised before the clock is read. Our networks'
    CPU products run in `cpu_products` (`offline_rl.algorithms.layers`) while timed, as a run picks them after."""
    use_cpu_products(cpu_products)
    try:
        return _timed_updates(algorithm, buffer, batch_size, updates, device, warmup)
    finally:
        use_cpu_products("auto")


def cpu_products_line() -> str:
    """What the eager path multiplies with (oneDNN unless its check failed), and what a run on this
    processor picks by default (`--cpu-products auto`), which may be the other path."""
    use_cpu_products("onednn")
    eager = describe_cpu_products()
    use_cpu_products("auto")
    return f"offline_rl eager: {eager}\na run on this processor (--cpu-products auto): {describe_cpu_products()}"


def _timed_updates(algorithm: Any, buffer: Any, batch_size: int, updates: int, device: str, warmup: int) -> float:
    with policy_within_training_step(algorithm.policy):
        for _ in range(warmup):  # allocator, lazy initialisation, kernel selection, a CUDA graph's capture
            algorithm.update(buffer=buffer, sample_size=batch_size)
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(updates):
            algorithm.update(buffer=buffer, sample_size=batch_size)
        if device == "cuda":
            torch.cuda.synchronize()
    return updates / (time.perf_counter() - start)


_ONEDNN_LINEAR = getattr(torch.ops.mkldnn, "_linear_pointwise", None)


class MatrixFlops(TorchDispatchMode):
    """Adds up the FLOPs of every matrix product and convolution torch runs, by torch's own formulas
    (`torch.utils.flop_counter`), and of the oneDNN products our CPU critics use, which torch's
    table lacks. `FlopCounterMode` itself also attributes them to modules, and its
    module tracker fails on TorchRL's, which are tensordicts too."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            self.flops += formula(*args, **kwargs, out_val=out)
        elif func._overloadpacket is _ONEDNN_LINEAR:  # x @ weight.T, weight (out, in)
            x, weight = args[0], args[1]
            self.flops += 2 * math.prod(x.shape[:-1]) * weight.shape[0] * weight.shape[1]
        elif func._overloadpacket is torch.ops.aten.mkldnn_linear_backward_weights:  # grad_out.T @ x
            grad_out, x = args[0], args[1]
            self.flops += 2 * grad_out.shape[0] * grad_out.shape[1] * x.shape[1]
        return out


def matrix_gflop_per_update(algorithm: Any, buffer: Any, batch_size: int) -> float:
    """GFLOP of the matrix products and convolutions of one `update`. Why: it is the arithmetic an
    implementation asks of the device whatever its speed, so updates/s times it says how much of a
    device's peak a path uses, and two implementations' counts say which does more work for the same
    update. Count on an eager algorithm: a replayed CUDA graph runs its kernels out of the counter's
    sight. The update it counts is a real one (its state moves on), under a forked random state."""
    counter = MatrixFlops()
    with torch.random.fork_rng(), policy_within_training_step(algorithm.policy), counter:
        algorithm.update(buffer=buffer, sample_size=batch_size)
    return counter.flops / 1e9
