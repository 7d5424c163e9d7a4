"""The process's random number generators, saved with each checkpoint and restored on resume.

Why: a run stopped and resumed (Ctrl-C, a scheduler's SIGTERM, a preempted cluster job) should
train exactly as it would have without the stop. Networks and optimisers alone do not make that
happen: batch indices, the actor's samples, the conservative term's uniform actions and ε-greedy
evaluation all draw from the global generators, which a fresh process reseeds from `--seed`. So
the checkpoint also holds the state of Python's `random`, numpy's global generator, torch's CPU
generator and every initialised CUDA device's generator, in plain types and tensors that
`torch.load(..., weights_only=True)` accepts.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

RANDOM_STATE_KEY = "random_state"
"""Checkpoint field holding `capture_random_state()`."""


def capture_random_state(*, cuda: bool = True) -> dict[str, Any]:
    """The state of every global generator a training run draws from (without `cuda`, the host's only)."""
    version, internal, gauss = random.getstate()
    numpy_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
        "python": {"version": version, "internal": list(internal), "gauss": gauss},
        "numpy": {
            "key": torch.from_numpy(numpy_state["state"]["key"].astype(np.int64)),
            "pos": int(numpy_state["state"]["pos"]),
            "has_gauss": int(numpy_state["has_gauss"]),
            "gauss": float(numpy_state["gauss"]),
        },
        "torch": torch.get_rng_state(),
    }
    if cuda and torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_random_state(state: dict[str, Any]) -> None:
    """Put the generators back as `capture_random_state` found them. CUDA generators are restored
    in a process that uses CUDA, for the devices both machines have (a checkpoint moved to another
    machine still resumes)."""
    python = state["python"]
    random.setstate((python["version"], tuple(python["internal"]), python["gauss"]))
    numpy = state["numpy"]
    np.random.set_state(
        (
            "MT19937",
            numpy["key"].cpu().numpy().astype(np.uint32),
            numpy["pos"],
            numpy["has_gauss"],
            numpy["gauss"],
        )
    )
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available() and torch.cuda.is_initialized():
        for index, cuda_state in enumerate(state["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(cuda_state.cpu(), index)


@contextlib.contextmanager
def preserved_random_state() -> Iterator[None]:
    """Whatever the block draws from the host's generators, they leave it as they entered it.

    For the work a run does beside training (exporting a policy file builds a network on the CPU,
    whose initialisation draws): without it an epoch that set a new best would shift every later
    draw, and a resumed run, whose first evaluation is never a new best, would part from the run it
    continues. CUDA generators are left alone: a captured update's CUDA graph replays against them
    mid-run, and nothing beside training draws on the GPU."""
    state = capture_random_state(cuda=False)
    try:
        yield
    finally:
        restore_random_state(state)
