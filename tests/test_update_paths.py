"""Eager and captured (CUDA graph) updates, and statistics read once per logging window.

The CUDA tests run where CUDA is present (the lent GPU machines); the CPU ones everywhere.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from test_cql_sac_training import build, narrow_band_buffer, small_config
from tianshou.algorithm.algorithm_base import policy_within_training_step

from offline_rl.algorithm_base import stat_names
from offline_rl.cql_sac import CQLSACConfig
from offline_rl.cql_sac.algorithm import CQLSACTrainingStats
from offline_rl.cql_sac.networks import EnsembleCritic

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")


def run_updates(algo, buffer, updates: int, batch_size: int = 64) -> list:
    with policy_within_training_step(algo.policy):
        return [algo.update(buffer, batch_size) for _ in range(updates)]


def figures(stats) -> np.ndarray:
    return np.array([getattr(stats, name) for name in stat_names(CQLSACTrainingStats)])


def test_statistics_of_a_window_are_the_mean_of_its_updates() -> None:
    buffer = narrow_band_buffer()
    torch.manual_seed(0)
    every_update = build(small_config(with_lagrange=True))
    windowed = copy.deepcopy(every_update)
    windowed.statistics_interval = 4
    every_update.process_buffer(buffer), windowed.process_buffer(buffer)
    torch.manual_seed(1)
    per_update = [figures(stats) for stats in run_updates(every_update, buffer, 8)]
    torch.manual_seed(1)
    reported = [figures(stats) for stats in run_updates(windowed, buffer, 8)]
    assert np.isnan(reported[0]).all() and np.isnan(reported[2]).all()  # nothing read before a window closes
    np.testing.assert_allclose(reported[3], np.mean(per_update[:4], axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(reported[4], reported[3])  # the latest window's mean until the next closes
    np.testing.assert_allclose(reported[7], np.mean(per_update[4:], axis=0), rtol=1e-5, atol=1e-6)
    assert windowed.statistics.take_fresh() and not windowed.statistics.take_fresh()


def test_windows_follow_the_run_update_count_across_a_resume() -> None:
    buffer = narrow_band_buffer()
    algo = build(small_config())
    algo.process_buffer(buffer)
    run_updates(algo, buffer, 6)
    resumed = build(small_config())
    resumed.load_state_dict(algo.state_dict())
    resumed.statistics_interval = 4
    resumed.process_buffer(buffer)
    reported = [figures(stats) for stats in run_updates(resumed, buffer, 2)]  # updates 7 and 8
    assert np.isnan(reported[0]).all() and np.isfinite(reported[1]).all()  # the window closes at update 8


def test_the_cpu_path_is_eager_and_says_why() -> None:
    algo = build(small_config())
    assert algo.update_path() == "updates: eager (the device is cpu; CUDA graphs need CUDA)"
    algo.capture = False
    assert algo.update_path() == "updates: eager (--no-compile)"


def test_every_optimiser_is_made_capturable() -> None:
    from offline_rl.cuda_graphs import make_optimizers_capturable

    algo = build(small_config(with_lagrange=True))
    optimizers = algo.capturable_optimizers()
    assert {id(o) for o in optimizers} == {
        id(o) for o in (algo._actor_optim, *algo._critic_optims, algo._alpha_optim, algo._lagrange_optim)
    }
    make_optimizers_capturable(optimizers)
    assert all(group["capturable"] for optimizer in optimizers for group in optimizer.param_groups)


def test_batched_critics_equal_one_critic_at_a_time() -> None:
    """The GPU's one-product-per-layer path computes what the CPU's per-critic products do."""
    torch.manual_seed(0)
    critic = EnsembleCritic(5, 2, [16, 16], num_critics=3, orthogonal_init=False)
    obs, actions = torch.randn(7, 5), torch.rand(7, 4, 2) * 2 - 1
    looped = critic(obs, actions)
    inputs = torch.cat([obs.unsqueeze(1).expand(7, 4, 5), actions], dim=-1).reshape(28, -1)
    batched = critic._batched(inputs, detach_params=False).view(3, 7, 4)
    torch.testing.assert_close(batched, looped, rtol=1e-5, atol=1e-6)


def cuda_pair(config: CQLSACConfig, *, compiled: bool = False):
    """Two identical algorithms on CUDA: one captured (its losses compiled or not), one eager."""
    torch.manual_seed(0)
    captured = build(config, device="cuda")
    eager = copy.deepcopy(captured)
    captured.capture, eager.capture = True, False
    captured.compile_losses = compiled
    return captured, eager


@needs_cuda
@pytest.mark.parametrize(
    "overrides",
    [{}, {"with_lagrange": True, "max_grad_norm": 1.0}, {"calibrated": True, "max_target_backup": True}],
    ids=["default", "lagrange-clipped", "calql-max-backup"],
)
def test_captured_and_eager_updates_agree(overrides: dict) -> None:
    assert_paths_agree(small_config(**overrides), compiled=False, tolerance=(1e-4, 1e-5))


@needs_cuda
def test_captured_compiled_and_eager_updates_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.compile fuses kernels, so float rounding differs slightly; the updates are the same.

    Inductor draws its own random numbers (equally distributed, another stream) unless told to
    call torch's random operators, as here, so that both paths see the same actions."""
    import torch._inductor.config

    monkeypatch.setattr(torch._inductor.config, "fallback_random", True)
    assert_paths_agree(small_config(with_lagrange=True), compiled=True, tolerance=(1e-3, 1e-4))


def assert_paths_agree(config: CQLSACConfig, *, compiled: bool, tolerance: tuple[float, float]) -> None:
    rtol, atol = tolerance
    buffer = narrow_band_buffer()
    captured, eager = cuda_pair(config, compiled=compiled)
    assert captured.update_path().startswith("updates: captured")
    captured.process_buffer(buffer), eager.process_buffer(buffer)
    torch.manual_seed(5)
    from_graph = [figures(stats) for stats in run_updates(captured, buffer, 12)]
    torch.manual_seed(5)
    from_eager = [figures(stats) for stats in run_updates(eager, buffer, 12)]
    assert captured._captured is not None and captured._captured.captured  # replays happened
    assert captured.compile_losses == compiled  # (a compiler failure would have switched it off)
    np.testing.assert_allclose(np.array(from_graph), np.array(from_eager), rtol=rtol, atol=atol)
    for name, value in captured.state_dict().items():
        if isinstance(value, torch.Tensor):
            torch.testing.assert_close(value, eager.state_dict()[name], rtol=rtol, atol=atol, msg=name)
    assert captured._host_updates == eager._host_updates == int(captured.num_updates) == 12


@needs_cuda
def test_a_checkpoint_of_the_captured_path_resumes_identically_in_the_eager_path() -> None:
    buffer = narrow_band_buffer()
    captured, _ = cuda_pair(small_config(with_lagrange=True))
    captured.process_buffer(buffer)
    run_updates(captured, buffer, 10)
    resumed = build(small_config(with_lagrange=True), device="cuda")
    resumed.load_state_dict(copy.deepcopy(captured.state_dict()))
    resumed.capture = captured.capture = False
    resumed.process_buffer(buffer)
    rng = torch.cuda.get_rng_state()
    continued = [figures(stats) for stats in run_updates(captured, buffer, 5)]
    torch.cuda.set_rng_state(rng)
    restarted = [figures(stats) for stats in run_updates(resumed, buffer, 5)]
    np.testing.assert_array_equal(np.array(continued), np.array(restarted))
    assert int(resumed.num_updates) == 15


def test_the_logger_writes_each_closed_window_once() -> None:
    """Tianshou's trainer hands every update's statistics to the logger; only window ends are written."""
    from dataclasses import asdict

    from offline_rl.apps.training import log_closed_windows

    class RecordingLogger:
        update_interval = 1000

        def __init__(self) -> None:
            self.written: list[tuple[int, dict]] = []

        def log_update_data(self, data: dict, step: int) -> None:
            self.written.append((step, data))

    buffer = narrow_band_buffer()
    algo = build(small_config())
    algo.statistics_interval = 3
    algo.process_buffer(buffer)
    logger = log_closed_windows(RecordingLogger(), algo)
    assert logger.update_interval == 1  # the algorithm's windows decide, not Tianshou's counter
    with policy_within_training_step(algo.policy):
        for step in range(1, 8):
            logger.log_update_data(asdict(algo.update(buffer, 64)), step)
    assert [step for step, _ in logger.written] == [3, 6]
    assert all(np.isfinite(data["critic_loss"]) for _, data in logger.written)
