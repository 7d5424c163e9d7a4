"""Every private Tianshou/torch API in `offline_rl.core.compat` behaves as offline_rl assumes, on the
installed versions: an upgrade that changes one fails here, not as a silent wrong result."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import torch
from tianshou.algorithm.algorithm_base import policy_within_training_step
from tianshou.data import Batch, ReplayBuffer

from offline_rl.algorithms.cql_sac import CQLSAC, CQLSACConfig
from offline_rl.algorithms.cql_sac.algorithm import CQLSACTrainingStats
from offline_rl.algorithms.training_stats import stat_names
from offline_rl.core import compat
from offline_rl.data.transitions import make_replay_buffer


def filled_by_tianshou(size: int) -> ReplayBuffer:
    buffer = ReplayBuffer(size)
    for step in range(size):
        last = step == size - 1
        buffer.add(
            Batch(
                obs=np.array([step]),
                act=0,
                rew=float(step),
                terminated=False,
                truncated=last,
                obs_next=np.array([step + 1]),
            )
        )
    return buffer


def test_mark_buffer_full_matches_tianshous_own_full_buffer() -> None:
    size = 5
    reference = filled_by_tianshou(size)
    ours = make_replay_buffer(
        obs=np.arange(size)[:, None],
        act=np.zeros(size, dtype=np.int64),
        rew=np.arange(size, dtype=np.float32),
        terminated=np.zeros(size, dtype=bool),
        truncated=np.eye(size, dtype=bool)[-1],
        obs_next=np.arange(1, size + 1)[:, None],
    )
    assert len(ours) == len(reference) == size
    assert ours._insertion_idx == reference._insertion_idx == 0
    np.testing.assert_array_equal(ours.sample_indices(0), reference.sample_indices(0))
    np.testing.assert_array_equal(ours.next(np.arange(size)), reference.next(np.arange(size)))
    np.testing.assert_array_equal(ours.prev(np.arange(size)), reference.prev(np.arange(size)))
    np.testing.assert_array_equal(ours.last_index, reference.last_index)
    np.testing.assert_array_equal(compat.buffer_columns(ours).rew, reference.rew)


def test_write_buffer_hdf5_writes_what_tianshous_save_hdf5_writes(tmp_path) -> None:
    import h5py

    buffer = filled_by_tianshou(6)
    buffer.save_hdf5(str(tmp_path / "tianshou.hdf5"), compression="gzip")
    with h5py.File(tmp_path / "ours.hdf5", "w") as file:
        compat.write_buffer_hdf5(buffer, file, compression="gzip")

    def contents(name: str) -> dict:
        found: dict = {}
        with h5py.File(tmp_path / name, "r") as file:
            file.visititems(
                lambda key, item: found.setdefault(
                    key, (dict(item.attrs), item[()].tobytes() if isinstance(item, h5py.Dataset) else None)
                )
            )
            found["/"] = (dict(file.attrs), None)
        return found

    assert contents("ours.hdf5") == contents("tianshou.hdf5")
    loaded = ReplayBuffer.load_hdf5(str(tmp_path / "ours.hdf5"))
    np.testing.assert_array_equal(loaded.obs_next, buffer.obs_next)
    assert len(loaded) == len(buffer)


def test_read_buffer_hdf5_reads_what_tianshous_load_hdf5_reads(tmp_path) -> None:
    """Every attribute, column and option, for a plain buffer and a frame-stacked one; only how often
    each array is copied on the way differs."""
    import pickle

    from conftest import synthetic_frame_stack_buffer
    from offline_rl.data import save_buffer

    def same(ours: object, theirs: object) -> None:
        assert type(ours) is type(theirs)
        if isinstance(theirs, Batch | dict):
            theirs_items = dict(theirs.items())
            assert dict(ours.items()).keys() == theirs_items.keys()  # type: ignore[union-attr]
            for key, value in theirs_items.items():
                same(ours[key], value)  # type: ignore[index]
        elif isinstance(theirs, np.ndarray):
            assert ours.dtype == theirs.dtype  # type: ignore[union-attr]
            np.testing.assert_array_equal(ours, theirs)
        else:  # numbers, strings, pickled objects (a buffer's RandomState)
            assert pickle.dumps(ours) == pickle.dumps(theirs)

    for name, buffer in (("plain", filled_by_tianshou(6)), ("stacked", synthetic_frame_stack_buffer(200, 0))):
        path = save_buffer(buffer, tmp_path / f"{name}.hdf5")
        theirs = ReplayBuffer.load_hdf5.__func__(type(buffer), str(path))  # Tianshou's, even for FrameStackBuffer
        ours = compat.read_buffer_hdf5(type(buffer), str(path))
        assert vars(ours).keys() == vars(theirs).keys()
        for key, value in vars(theirs).items():
            same(vars(ours)[key], value)
        np.testing.assert_array_equal(ours[np.arange(len(ours))].obs_next, theirs[np.arange(len(theirs))].obs_next)


def test_columns_and_attributes_outside_tianshous_reserved_keys() -> None:
    buffer = ReplayBuffer(3)
    columns = Batch(act=np.arange(3), episode_id=np.array([7, 7, 8]))
    compat.set_buffer_columns(buffer, columns)
    compat.mark_buffer_full(buffer, 3)
    assert compat.buffer_columns(buffer) is columns
    compat.set_buffer_attribute(buffer, "dataset_info", {"name": "x"})
    assert buffer.__dict__["dataset_info"] == {"name": "x"}


def test_batch_of_arrays_equals_a_batch_built_the_public_way() -> None:
    arrays = {"obs": np.ones((2, 3)), "act": np.array([1, 2]), "info": Batch()}
    fast, public = compat.batch_of_arrays(**arrays), Batch(**arrays)
    assert isinstance(fast, Batch) and len(fast) == len(public) == 2
    np.testing.assert_array_equal(fast.obs, public.obs)
    np.testing.assert_array_equal(fast[1].act, public[1].act)


def test_polyak_update_is_the_lerp_it_claims() -> None:
    targets, sources = [torch.zeros(3), torch.ones(2)], [torch.ones(3), torch.full((2,), 3.0)]
    expected = [t + 0.25 * (s - t) for t, s in zip(targets, sources, strict=True)]
    compat.polyak_update_(targets, sources, 0.25)
    for got, want in zip(targets, expected, strict=True):
        torch.testing.assert_close(got, want)


def test_statistics_are_exactly_the_declared_ones() -> None:
    algo = CQLSAC.build(
        gym.spaces.Box(-1, 1, (3,), np.float32),
        gym.spaces.Box(-1, 1, (2,), np.float32),
        CQLSACConfig(actor_hidden_sizes=[8], critic_layers=1, cql_n_actions=2),
    )
    size = 16
    buffer = make_replay_buffer(
        obs=np.random.default_rng(0).normal(size=(size, 3)).astype(np.float32),
        act=np.zeros((size, 2), np.float32),
        rew=np.zeros(size, np.float32),
        terminated=np.zeros(size, bool),
        truncated=np.zeros(size, bool),
        obs_next=np.zeros((size, 3), np.float32),
    )
    with policy_within_training_step(algo.policy):
        stats = algo.update(algo.process_buffer(buffer), 8)
    declared = stat_names(CQLSACTrainingStats)
    assert "lagrange_multiplier" in declared and "train_time" not in declared
    assert all(isinstance(getattr(stats, name), float) for name in declared)
    assert stats.train_time > 0
    assert {field.name for field in dataclasses.fields(stats)} >= set(declared)


def test_importance_weights_equal_what_a_prioritized_buffer_puts_in_its_batches() -> None:
    from tianshou.data import PrioritizedReplayBuffer

    for weight_norm in (True, False):
        buffer = PrioritizedReplayBuffer(8, alpha=0.6, beta=0.4, weight_norm=weight_norm)
        for step in range(8):
            buffer.add(
                Batch(
                    obs=[step], act=[0], rew=[1.0], terminated=[False], truncated=[False], obs_next=[step], info=[{}]
                ),
                buffer_ids=[0],
            )
        buffer.update_weight(np.arange(8), np.linspace(0.5, 4.0, 8))
        indices = np.array([1, 5, 7, 5])
        np.testing.assert_allclose(compat.importance_weights(buffer, indices), buffer[indices].weight)


def test_auto_alpha_parts_are_the_parameter_and_optimiser_auto_alpha_updates() -> None:
    from tianshou.algorithm.modelfree.sac import AutoAlpha
    from tianshou.algorithm.optim import AdamOptimizerFactory

    alpha = AutoAlpha(-2.0, 0.5, AdamOptimizerFactory(lr=0.1))
    log_alpha, optimizer, target_entropy = compat.auto_alpha_parts(alpha)
    assert target_entropy == -2.0 and float(log_alpha.detach()) == 0.5
    assert optimizer.param_groups[0]["params"][0] is log_alpha
    alpha.update(torch.tensor([0.0]))  # entropy 0 > target: α must fall, through this parameter
    assert float(log_alpha.detach()) < 0.5 and alpha.value == float(log_alpha.detach().exp())


def test_tianshous_jit_functions_are_cached_on_disk_between_processes() -> None:
    """Tianshou compiles its numba functions in every process that builds a policy or a vector
    buffer (~10 s here); importing offline_rl switches numba's disk cache on for each of them."""
    import importlib

    from numba.core.registry import CPUDispatcher

    import offline_rl.core.compat  # noqa: F401  (the switch happens on import)

    functions = [
        function
        for name in ("tianshou.algorithm.algorithm_base", "tianshou.data.buffer.manager", "tianshou.data.utils.segtree")
        for function in vars(importlib.import_module(name)).values()
        if isinstance(function, CPUDispatcher)
    ]
    assert len(functions) >= 7
    assert all(type(function._cache).__name__ == "FunctionCache" for function in functions)


def test_the_trainer_hooks_offline_rl_overrides_are_the_ones_tianshous_epoch_uses(monkeypatch) -> None:
    """Renamed hooks would leave `WindowedOfflineTrainer`'s overrides silently unused: the logging
    hook is checked by `test_update_paths`'s trainer test, the progress bar here."""
    from test_cql_sac_training import build, narrow_band_buffer, small_config
    from tianshou.trainer import OfflineTrainer, OfflineTrainerParams, OffPolicyTrainer

    from offline_rl.algorithms import trainer

    assert all(hasattr(kind, name) for kind in (OfflineTrainer, OffPolicyTrainer) for name in compat.TRAINER_HOOKS)
    postfix_refreshes: list[bool] = []
    set_postfix = trainer.tqdm.tqdm.set_postfix

    def recording_set_postfix(self, ordered_dict=None, refresh=True, **kwargs):
        postfix_refreshes.append(refresh)
        return set_postfix(self, ordered_dict, refresh=refresh, **kwargs)

    monkeypatch.setattr(trainer.tqdm.tqdm, "set_postfix", recording_set_postfix)
    algo = build(small_config())
    params = OfflineTrainerParams(
        buffer=narrow_band_buffer(), test_collector=None, max_epochs=1, epoch_num_steps=3, batch_size=64
    )
    algo.run_training(dataclasses.replace(params, show_progress=True))
    assert postfix_refreshes and not any(postfix_refreshes)  # Tianshou's epoch bar, built by our `_pbar`


def test_the_target_update_counter_times_qrdqns_target_copies() -> None:
    from tianshou.algorithm import QRDQN
    from tianshou.algorithm.modelfree.qrdqn import QRDQNPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory

    from offline_rl.algorithms.discrete_cql.networks import QuantileMLP

    env = gym.make("CartPole-v1")
    policy = QRDQNPolicy(model=QuantileMLP(4, 2, 8, [16]), action_space=env.action_space)
    algorithm = QRDQN(policy=policy, optim=AdamOptimizerFactory(lr=1e-2), num_quantiles=8, target_update_freq=5)
    buffer = ReplayBuffer(64)
    for step in range(64):
        buffer.add(Batch(obs=np.full(4, step / 64), act=step % 2, rew=1.0, terminated=False, truncated=step == 63,
                         obs_next=np.full(4, (step + 1) / 64)))  # fmt: skip

    def copied_by_one_update(counter: int) -> bool:
        compat.set_target_update_counter(algorithm, counter)
        target_before = [p.detach().clone() for p in algorithm.model_old.parameters()]
        online_before = [p.detach().clone() for p in policy.model.parameters()]
        with policy_within_training_step(policy):
            algorithm.update(buffer=buffer, sample_size=16)
        assert compat.target_update_counter(algorithm) == counter + 1
        target = list(algorithm.model_old.parameters())
        if all(torch.equal(a, b) for a, b in zip(target, target_before, strict=True)):
            return False
        assert all(torch.equal(a, b) for a, b in zip(target, online_before, strict=True))
        return True

    assert not copied_by_one_update(3) and copied_by_one_update(5) and not copied_by_one_update(6)


def test_the_behaviour_trainer_switches_the_cache_on_before_tianshou_compiles(monkeypatch) -> None:
    """`atari_qrdqn.py` builds Tianshou's own QRDQN policy, whose constructor compiles Tianshou's numba
    functions; without the cache switched on first, every start of the script paid that (~5 s)."""
    from tianshou.algorithm.algorithm_base import Policy

    from offline_rl.cli import atari_qrdqn

    events: list[str] = []
    switch_on, tianshou_compile = compat.cache_tianshou_jit, Policy._compile
    monkeypatch.setattr(compat, "cache_tianshou_jit", lambda: (events.append("cache on"), switch_on())[1])
    monkeypatch.setattr(Policy, "_compile", staticmethod(lambda: (events.append("compile"), tianshou_compile())[1]))
    config = atari_qrdqn.config_from_args(["--task", "CartPole-v1", "--num-quantiles", "8"])
    atari_qrdqn.build_qrdqn(config, gym.make("CartPole-v1"), "cpu")
    assert events == ["cache on", "compile"]


def test_the_compiler_notices_dropped_are_torch_s_own_and_nothing_else_is() -> None:
    """Each notice is still issued by the torch module named for it (else the filter is dead code),
    and once quieted, that module's other messages still get through."""
    import importlib
    import inspect
    import logging
    import warnings

    for module, start in compat.COMPILER_NOTICES.items():
        assert start in inspect.getsource(importlib.import_module(module)), module

    class Keep(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.messages: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.messages.append(record.getMessage())

    logger = logging.getLogger("torch._dynamo.variables.ctx_manager")
    kept = Keep()
    logger.addHandler(kept)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compat.quiet_compiler_notices()
            compat.quiet_compiler_notices()  # twice: still one filter
            logger.warning("Profiler record function %s will be ignored", "record_function")
            logger.warning("Unsupported context manager %s", "x")
            tf32_hint = "TensorFloat32 tensor cores for float32 matrix multiplication available but not enabled. "
            warnings.warn(tf32_hint, stacklevel=1)
            warnings.warn("another warning", stacklevel=1)
    finally:
        logger.removeHandler(kept)
    assert kept.messages == ["Unsupported context manager x"]
    assert [str(warning.message) for warning in caught] == ["another warning"]
    assert sum(isinstance(f, compat._DropNotice) for f in logger.filters) == 1


def test_tianshous_compiles_hold_a_lock_the_machines_processes_share() -> None:
    """Runs started together before numba's cache exists (a sweep's trials, a fresh install's test
    workers) each compiled Tianshou's functions, seconds apiece; each compile now holds
    a lock that processes share, so the others wait and then load what the first wrote to the cache."""
    from tianshou.algorithm.algorithm_base import Policy
    from tianshou.data.buffer.manager import ReplayBufferManager
    from tianshou.data.utils.segtree import SegmentTree

    from offline_rl.core.files import FileLock

    compat.cache_tianshou_jit()  # a second time: still one lock around each, not one inside another
    for owner in (Policy, ReplayBufferManager, SegmentTree):
        declared = vars(owner)["_compile"]
        assert (declared.__func__ if isinstance(declared, staticmethod) else declared).__wrapped__.__qualname__ == (
            f"{owner.__name__}._compile"
        )
    held: list[bool] = []

    def compile_(*args: object) -> None:  # what another process finds while a compile runs
        other = FileLock(compat.compile_lock_path())
        held.append(not other.acquire(wait=False))
        other.release()

    locked = compat.one_compile_at_a_time(compile_)
    locked()
    compat.one_compile_at_a_time(lambda: locked(object()))()  # a compile inside another waits for nothing
    assert held == [True, True]
    after = FileLock(compat.compile_lock_path())
    assert after.acquire(wait=False)  # released
    after.release()
    SegmentTree(4)  # Tianshou's own compiles, through the lock
    Policy._compile()


def test_a_vector_buffer_samples_the_same_indices_after_its_generators_are_put_back() -> None:
    """Tianshou 2 buffers draw sampled indices from generators of their own (the manager's picks the
    sub-buffers, each sub-buffer's its rows): an online run's checkpoint keeps all of them."""
    from tianshou.data import Batch, VectorReplayBuffer

    def filled() -> VectorReplayBuffer:
        buffer = VectorReplayBuffer(40, 2)
        for step in range(15):
            rows = Batch(obs=np.full((2, 1), step), act=np.zeros(2), rew=np.zeros(2), terminated=np.zeros(2, bool),
                         truncated=np.zeros(2, bool), obs_next=np.zeros((2, 1)), info=Batch())  # fmt: skip
            buffer.add(rows, buffer_ids=[0, 1])
        return buffer

    first, second = filled(), filled()
    first.sample_indices(7)
    state = compat.buffer_sampler_state(first)
    assert len(state) == 3
    expected = first.sample_indices(9)
    assert not np.array_equal(second.sample_indices(9), expected)  # its generators are where they started
    compat.set_buffer_sampler_state(second, state)
    assert np.array_equal(second.sample_indices(9), expected)


def test_a_collector_acts_next_on_the_observations_it_is_given() -> None:
    from tianshou.data import Collector
    from tianshou.env import DummyVectorEnv

    env = gym.make("Pendulum-v1")
    policy = CQLSAC.build(env.observation_space, env.action_space, CQLSACConfig(actor_hidden_sizes=[4])).policy
    envs = DummyVectorEnv([lambda: gym.make("Pendulum-v1")])
    collector = Collector(policy, envs)
    collector.reset()
    given = np.array([[0.5, -0.5, 0.25]], dtype=np.float32)
    compat.resume_collector_at(collector, given)
    np.testing.assert_array_equal(compat.collector_pending_obs(collector), given)
