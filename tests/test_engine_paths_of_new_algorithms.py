"""TD3+BC, IQL, ReBRAC and BC through the engine's other paths: their losses and optimiser steps fused by
torch.compile (run here on CPU, as CUDA runs them before capturing), and, on a CUDA device, captured as
CUDA graphs (one recording per phase: TD3's updates with and without an actor step), each giving the
eager path's updates."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from test_cql_sac_training import narrow_band_buffer
from tianshou.algorithm.algorithm_base import policy_within_training_step

from offline_rl.algorithms.bc import BC, BCConfig
from offline_rl.algorithms.iql import IQL, IQLConfig
from offline_rl.algorithms.rebrac import ReBRAC, ReBRACConfig
from offline_rl.algorithms.td3_bc import TD3BC, TD3BCConfig
from offline_rl.algorithms.training_stats import stat_names

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
SPACES = (gym.spaces.Box(-np.inf, np.inf, (3,), np.float32), gym.spaces.Box(-1, 1, (2,), np.float32))
BUILDERS: dict[str, Callable[[str], Any]] = {
    "td3_bc": lambda device: TD3BC.build(*SPACES, TD3BCConfig(hidden_sizes=[16, 16]), device=device),
    "iql": lambda device: IQL.build(*SPACES, IQLConfig(hidden_sizes=[16, 16], schedule_updates=8), device=device),
    "rebrac": lambda device: ReBRAC.build(*SPACES, ReBRACConfig(hidden_sizes=[16, 16]), device=device),
    "bc": lambda device: BC.build(*SPACES, BCConfig(hidden_sizes=[16, 16], top_fraction=0.5), device=device),
}


def figures(algo: Any, stats: Any) -> np.ndarray:
    return np.array([getattr(stats, name) for name in stat_names(algo.STATS)])


def run(algo: Any, buffer: Any, updates: int) -> list[np.ndarray]:
    algo.statistics_interval = 1
    with policy_within_training_step(algo.policy):
        return [figures(algo, algo.update(buffer, 32)) for _ in range(updates)]


def assert_same_runs(first: Any, second: Any, buffer: Any, *, updates: int, rtol: float, atol: float) -> None:
    for algo in (first, second):
        algo.plan(updates)
        algo.process_buffer(buffer)
    torch.manual_seed(5)
    from_first = run(first, buffer, updates)
    torch.manual_seed(5)
    from_second = run(second, buffer, updates)
    np.testing.assert_allclose(np.array(from_first), np.array(from_second), rtol=rtol, atol=atol)
    for name, value in first.state_dict().items():
        if isinstance(value, torch.Tensor):
            torch.testing.assert_close(value, second.state_dict()[name], rtol=rtol, atol=atol, msg=name)


@pytest.fixture
def inductor_draws_with_torch() -> Iterator[None]:
    """Compiled code drawing its noise with torch's own operators, as the eager path does."""
    import torch._inductor.config

    with torch._inductor.config.patch(fallback_random=True):
        yield


@pytest.mark.usefixtures("cpu_compiler", "inductor_draws_with_torch")
@pytest.mark.parametrize("name", ["td3_bc", "iql"])
def test_compiled_stages_give_the_eager_updates(name: str) -> None:
    """TD3+BC's two stages compiled (each phase of its delayed actor once), IQL's rate schedule read from
    the device inside the compiled optimiser step: the eager path's updates, to compiler rounding."""
    import torch._dynamo

    torch._dynamo.reset()
    buffer = narrow_band_buffer()
    torch.manual_seed(0)
    eager = BUILDERS[name]("cpu")
    compiled = copy.deepcopy(eager)
    compiled._compile_update()
    assert_same_runs(compiled, eager, buffer, updates=6, rtol=1e-3, atol=1e-4)
    if name == "iql":
        assert float(compiled.actor_lr_now) < compiled.config.actor_lr  # the schedule moved, compiled


@needs_cuda
@pytest.mark.parametrize("name", list(BUILDERS))
@pytest.mark.parametrize("compiled", [False, True], ids=["captured", "captured-compiled"])
def test_captured_updates_give_the_eager_ones(name: str, compiled: bool, request: pytest.FixtureRequest) -> None:
    if compiled:
        request.getfixturevalue("inductor_draws_with_torch")
    buffer = narrow_band_buffer()
    torch.manual_seed(0)
    captured = BUILDERS[name]("cuda")
    eager = copy.deepcopy(captured)
    captured.capture, eager.capture = True, False
    captured.compile_update = compiled
    assert captured.update_path().startswith("updates: captured")
    tolerance = (1e-3, 1e-4) if compiled else (1e-4, 1e-5)
    assert_same_runs(captured, eager, buffer, updates=12, rtol=tolerance[0], atol=tolerance[1])
    assert any(recording.captured for recording in captured._captured.values())
    phases = 2 if name in ("td3_bc", "rebrac") else 1  # updates with and without an actor step
    assert len(captured._captured) == phases
    assert captured._host_updates == eager._host_updates == int(captured.num_updates) == 12
