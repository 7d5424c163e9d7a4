"""Timing helper shared by the throughput benchmarks."""

from __future__ import annotations

import time
from typing import Any

import torch
from tianshou.algorithm.algorithm_base import policy_within_training_step


def updates_per_second(
    algorithm: Any, buffer: Any, batch_size: int, updates: int, device: str, warmup: int = 5
) -> float:
    """Gradient updates per second through `algorithm.update(buffer, batch_size)`, as Tianshou's
    offline trainer calls it; CUDA work is synchronised before the clock is read."""
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
