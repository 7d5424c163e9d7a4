"""Eager and captured (CUDA graph) updates, and statistics read once per logging window.

The CUDA tests run where CUDA is present (the lent GPU machines); the CPU ones everywhere.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from test_cql_sac_training import build, narrow_band_buffer, small_config
from tianshou.algorithm.algorithm_base import policy_within_training_step

from offline_rl.algorithms.base import compiler_failure
from offline_rl.algorithms.capture import use_multi_tensor_kernels
from offline_rl.algorithms.cql_sac import CQLSAC, CQLSACConfig
from offline_rl.algorithms.cql_sac.algorithm import CQLSACTrainingStats
from offline_rl.algorithms.layers import bf16_products_hint, describe_cpu_products
from offline_rl.algorithms.training_stats import stat_names

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
    products = describe_cpu_products() + bf16_products_hint()  # which library; AMX's bf16 where present
    assert algo.update_path() == f"updates: eager (the device is cpu; CUDA graphs need CUDA); {products}"
    algo.capture = False
    assert algo.update_path() == f"updates: eager (--no-compile); {products}"


@pytest.mark.parametrize(
    ("precision", "hint"),
    [
        ("highest", "; float32 products (--matmul-precision high: TF32"),
        ("high", "; TF32 products (--matmul-precision highest: float32)"),
        ("medium", None),
    ],
)
def test_the_captured_path_names_its_products_and_the_flag_for_the_other_precision(
    monkeypatch: pytest.MonkeyPatch, precision: str, hint: str | None
) -> None:
    """torch.compile's own TF32 hint is quieted (it names a torch call, not this project's flag), so
    the run's line says which products it uses and how to have the other ones."""
    algo = build(small_config())
    monkeypatch.setattr(algo, "capture_blocker", lambda: None)  # as on CUDA, without one
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        line = algo.update_path()
    finally:
        torch.set_float32_matmul_precision(previous)
    assert line.startswith("updates: captured as one CUDA graph, losses and optimiser steps fused by torch.compile")
    assert ("products (--matmul-precision" in line) is (hint is not None)
    assert hint is None or hint in line


def optimizer_kernels(algo: CQLSAC) -> list[tuple[bool | None, bool | None]]:
    """Each optimiser group's (fused, foreach): the Adam kernels it steps with."""
    return [(group["fused"], group["foreach"]) for opt in algo.capturable_optimizers() for group in opt.param_groups]


def test_a_compiler_that_fails_is_dropped_and_named_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """Where the compiled update cannot be built (no C++ compiler here; on a GPU machine, no C
    compiler for Triton), the run goes on with the uncompiled update and its optimisers' own
    kernels, and its line names the cause, not torch's `backend='inductor' raised:` heading."""
    import torch._dynamo
    import torch._inductor.config

    buffer = narrow_band_buffer()
    algo = build(small_config())
    algo.process_buffer(buffer)
    kernels = optimizer_kernels(algo)
    algo._compile_update()
    torch._dynamo.reset()
    no_compiler = {"cpp.cxx": (None, "/nonexistent/g++")}
    with torch._inductor.config.patch(no_compiler), pytest.raises(Exception) as raised:
        run_updates(algo, buffer, 1)
    torch._dynamo.reset()
    algo._give_up_compiling(raised.value)
    line = capsys.readouterr().out.strip()
    assert line.startswith("updates: torch.compile failed (InvalidCxxCompiler: No working C++ compiler")
    assert line.endswith("); capturing the uncompiled update instead") and "\n" not in line
    assert not algo.compile_update and "compute_losses" not in vars(algo) and "apply_gradients" not in vars(algo)
    assert optimizer_kernels(algo) == kernels
    assert np.isfinite(figures(run_updates(algo, buffer, 1)[0])).all()


def test_a_compiler_failure_is_named_by_its_cause_not_by_torchs_heading() -> None:
    """torch heads a backend's error with `backend='...' raised:`; the line a run prints names the
    error under it (here the message Triton gives on a GPU machine without a C compiler)."""
    import torch._dynamo

    def backend_without_a_c_compiler(graph: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> None:
        raise RuntimeError("Failed to find C compiler. Please specify via CC environment variable.")

    torch._dynamo.reset()
    with pytest.raises(Exception) as raised:  # torch's wrapper of the backend's error
        torch.compile(lambda x: x * 2.0, backend=backend_without_a_c_compiler)(torch.ones(3))
    torch._dynamo.reset()
    assert str(raised.value).splitlines()[0].endswith("raised:")  # torch's heading, which says nothing
    assert compiler_failure(raised.value) == (
        "RuntimeError: Failed to find C compiler. Please specify via CC environment variable."
    )


def test_every_optimiser_is_made_capturable() -> None:
    from offline_rl.algorithms.capture import make_optimizers_capturable

    algo = build(small_config(with_lagrange=True))
    optimizers = algo.capturable_optimizers()
    assert {id(o) for o in optimizers} == {
        id(o) for o in (algo._actor_optim, *algo._critic_optims, algo._alpha_optim, algo._lagrange_optim)
    }
    make_optimizers_capturable(optimizers)
    assert all(group["capturable"] for optimizer in optimizers for group in optimizer.param_groups)


def cuda_pair(config: CQLSACConfig, *, compiled: bool = False):
    """Two identical algorithms on CUDA: one captured (its losses compiled or not), one eager."""
    torch.manual_seed(0)
    captured = build(config, device="cuda")
    eager = copy.deepcopy(captured)
    captured.capture, eager.capture = True, False
    captured.compile_update = compiled
    return captured, eager


@needs_cuda
@pytest.mark.parametrize(
    "overrides",
    [{}, {"with_lagrange": True, "max_grad_norm": 1.0}, {"calibrated": True, "max_target_backup": True}],
    ids=["default", "lagrange-clipped", "calql-max-backup"],
)
def test_captured_and_eager_updates_agree(overrides: dict) -> None:
    assert_paths_agree(small_config(**overrides), compiled=False, tolerance=(1e-4, 1e-5))


@pytest.fixture
def inductor_draws_with_torch() -> Iterator[None]:
    """Inductor draws its own random numbers (equally distributed, another stream) unless told to
    call torch's random operators, so that compiled and eager paths see the same actions. Set with
    the config's own `patch`: monkeypatch's undo left torch's config without the setting, and every
    compilation after it in the process failed."""
    import torch._inductor.config

    with torch._inductor.config.patch(fallback_random=True):
        yield


@needs_cuda
@pytest.mark.usefixtures("inductor_draws_with_torch")
def test_captured_compiled_and_eager_updates_agree() -> None:
    """torch.compile fuses kernels, so float rounding differs slightly; the updates are the same."""
    assert_paths_agree(small_config(with_lagrange=True), compiled=True, tolerance=(1e-3, 1e-4))


@pytest.mark.usefixtures("cpu_compiler", "inductor_draws_with_torch")
def test_compiled_updates_equal_eager_ones_on_cpu_and_compile_once_per_phase() -> None:
    """The losses and optimiser steps CUDA runs compiled, compiled here on CPU (inductor's C++
    backend, the optimisers switched to the multi-tensor kernels compiled steps use): same updates
    as eager over both phases (behaviour-cloning warm-up, then CQL), and the losses compiled once
    more for the second phase, never per update (comparing the update counter inside the compiled
    code recompiled each time)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    buffer = narrow_band_buffer()
    torch.manual_seed(0)
    eager = build(small_config(with_lagrange=True, bc_steps=2))
    compiled = copy.deepcopy(eager)
    compiled._compile_update()
    eager.process_buffer(buffer), compiled.process_buffer(buffer)
    assert all(group["foreach"] and not group["fused"] for group in compiled._actor_optim.param_groups)
    torch.manual_seed(5)
    from_compiled, graphs = [], []
    for _ in range(6):
        from_compiled += [figures(stats) for stats in run_updates(compiled, buffer, 1)]
        graphs.append(counters["stats"]["unique_graphs"])
    torch.manual_seed(5)
    from_eager = [figures(stats) for stats in run_updates(eager, buffer, 6)]
    np.testing.assert_allclose(np.array(from_compiled), np.array(from_eager), rtol=1e-3, atol=1e-4)
    for name, value in compiled.state_dict().items():
        if isinstance(value, torch.Tensor):
            torch.testing.assert_close(value, eager.state_dict()[name], rtol=1e-3, atol=1e-4, msg=name)
    first = graphs[0]  # the cloning phase's losses, and the optimiser steps (torch breaks those into parts)
    assert graphs == [first, first, first + 1, first + 1, first + 1, first + 1]  # + the CQL phase's losses


def test_a_checkpoint_does_not_carry_the_kernels_of_compiled_optimiser_steps() -> None:
    """A GPU run's compiled steps use multi-tensor kernels; resumed elsewhere (here on CPU, eagerly)
    the optimisers step with the implementation they were built with."""
    buffer = narrow_band_buffer()
    compiled = build(small_config())
    compiled.process_buffer(buffer)
    run_updates(compiled, buffer, 2)
    use_multi_tensor_kernels(compiled.capturable_optimizers(), True)  # what _compile_update does
    state = compiled.state_dict()
    assert state["_optimizers"][0]["param_groups"][0]["foreach"] is True
    resumed = build(small_config())
    resumed.load_state_dict(state)
    assert all(
        group["fused"] and group["foreach"] is None
        for optimizer in resumed.capturable_optimizers()
        for group in optimizer.param_groups
    )
    resumed.process_buffer(buffer)
    assert np.isfinite(figures(run_updates(resumed, buffer, 1)[0])).all()


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
    assert any(recording.captured for recording in captured._captured.values())  # replays happened
    assert captured.compile_update == compiled  # (a compiler failure would have switched it off)
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


def test_the_trainer_logs_each_closed_window_once() -> None:
    """Tianshou's trainer would hand every update's statistics to the logger and its moving averages;
    the algorithms' trainer does it when a window closes, and the logger writes each window once."""
    from tianshou.trainer import OfflineTrainerParams
    from tianshou.utils import LazyLogger

    from offline_rl.algorithms.trainer import WindowedOfflineTrainer
    from offline_rl.runs.record import log_every_window

    class RecordingLogger(LazyLogger):
        def __init__(self) -> None:
            super().__init__()
            self.update_interval = 1000
            self.written: list[tuple[int, dict]] = []

        def write(self, step_type: str, step: int, data: dict) -> None:
            if step_type.startswith("update"):
                self.written.append((step, data))

    buffer = narrow_band_buffer()
    algo = build(small_config())
    algo.statistics_interval = 3
    logger = log_every_window(RecordingLogger())
    params = OfflineTrainerParams(
        buffer=buffer, test_collector=None, max_epochs=1, epoch_num_steps=7, batch_size=64, logger=logger
    )
    trainer = algo.create_trainer(params)
    assert isinstance(trainer, WindowedOfflineTrainer)
    trainer.run()
    assert int(algo.num_updates) == 7
    assert [step for step, _ in logger.written] == [3, 6]
    assert all(np.isfinite(data["critic_loss"]) for _, data in logger.written)
    assert len(trainer._stat["critic_loss"].cache) == 2  # the moving averages: one value per window


def test_updates_run_in_training_mode_and_restore_the_previous_mode() -> None:
    buffer = narrow_band_buffer()
    algo = build(small_config())
    algo.process_buffer(buffer)
    seen: list[bool] = []
    step = algo.update_from_buffer

    def recording_step(*args, **kwargs):
        seen.append(all(module.training for module in algo.modules()))
        return step(*args, **kwargs)

    algo.update_from_buffer = recording_step
    algo.eval()
    run_updates(algo, buffer, 1)
    assert seen == [True] and not any(module.training for module in algo.modules())
    algo.train()
    run_updates(algo, buffer, 1)
    assert seen == [True, True] and all(module.training for module in algo.modules())


@pytest.mark.parametrize(
    ("num", "cores", "rendering", "expected"),
    [(10, 2, False, False), (10, 16, False, True), (1, 16, False, False), (10, 16, True, False)],
)
def test_envs_run_in_subprocesses_only_where_measured_faster(num, cores, rendering, expected) -> None:
    from offline_rl.runs.training import envs_in_subprocesses

    assert envs_in_subprocesses(num, cores=cores, rendering=rendering) is expected


def test_subprocess_envs_are_seeded_like_in_process_ones(monkeypatch) -> None:
    """The same seeds give the same episodes whichever way the envs run."""
    import gymnasium as gym
    from tianshou.env import DummyVectorEnv, SubprocVectorEnv

    from offline_rl.runs import training

    def first_observations() -> tuple[type, np.ndarray]:
        envs = training.vector_envs(lambda: gym.make("CartPole-v1"), 3, seed=7)
        try:
            observations, _ = envs.reset()
            return type(envs), np.asarray(observations)
        finally:
            envs.close()

    monkeypatch.setattr(training, "SUBPROCESS_ENVS_MIN_CORES", 10_000)
    in_process_type, in_process = first_observations()
    monkeypatch.setattr(training, "SUBPROCESS_ENVS_MIN_CORES", 1)
    subprocess_type, in_subprocesses = first_observations()
    assert (in_process_type, subprocess_type) == (DummyVectorEnv, SubprocVectorEnv)
    np.testing.assert_array_equal(in_subprocesses, in_process)
    assert len({row.tobytes() for row in in_process}) == 3  # each env its own seed
