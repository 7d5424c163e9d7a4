"""Discrete CQL's staged transitions: a batch drawn on the device is exactly the batch the buffer
itself (and `nstep_returns`) gives for the same transitions, for every kind of buffer."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from tianshou.data import PrioritizedReplayBuffer, ReplayBuffer

from offline_rl.algorithms.discrete_cql import CQLQRDQN, DiscreteCQLConfig
from offline_rl.algorithms.discrete_cql.algorithm import nstep_returns
from offline_rl.algorithms.discrete_cql.staging import StagedTransitions, stage_transitions
from offline_rl.algorithms.layers import describe_cpu_products
from offline_rl.data import FrameStackBufferBuilder
from offline_rl.data.frame_pool import FramePoolBuffer
from offline_rl.data.transitions import make_replay_buffer

N_STEP, GAMMA = 3, 0.9


def frame_stack_buffer(
    frame_shape: tuple[int, int] = (6, 6),
    episodes: tuple[tuple[int, bool], ...] = ((5, True), (1, False), (7, False)),
    actions: int = 3,
) -> ReplayBuffer:
    """Episodes (length, terminated) of random frames, by default 5, 1 and 7 steps of small ones (episode
    starts are padded); Atari-sized frames for the networks that need them."""
    rng = np.random.default_rng(0)
    builder = FrameStackBufferBuilder(frame_shape=frame_shape, max_frames=8)
    for length, terminal in episodes:
        stack = np.repeat(rng.integers(0, 256, (1, *frame_shape), dtype=np.uint8), 4, axis=0)
        for step in range(length):
            following = np.concatenate([stack[1:], rng.integers(0, 256, (1, *frame_shape), dtype=np.uint8)])
            last = step == length - 1
            builder.add(
                stack,
                int(rng.integers(actions)),
                float(rng.normal()),
                terminal and last,
                last and not terminal,
                following,
            )
            stack = following
    return builder.build()


def frame_pool_buffer() -> ReplayBuffer:
    rng = np.random.default_rng(1)
    size = 9
    return FramePoolBuffer(
        frames=rng.integers(0, 256, size=(20, 6, 6), dtype=np.uint8),
        obs_frames=rng.integers(0, 20, size=(size, 4)),
        obs_next_frames=rng.integers(0, 20, size=(size, 4)),
        act=rng.integers(0, 3, size),
        rew=rng.normal(size=size),
        terminated=np.arange(size) == 3,
        truncated=np.arange(size) == 6,
    )


def plain_buffer() -> ReplayBuffer:
    rng = np.random.default_rng(2)
    size = 12
    obs = rng.normal(size=(size, 4)).astype(np.float32)
    return make_replay_buffer(
        obs=obs,
        act=rng.integers(0, 3, size),
        rew=rng.normal(size=size).astype(np.float32),
        terminated=np.arange(size) == 4,
        truncated=np.arange(size) == 8,
        obs_next=obs + 1.0,
    )


@pytest.mark.parametrize("make_buffer", [frame_stack_buffer, frame_pool_buffer, plain_buffer])
@pytest.mark.parametrize("clip", [False, True])
def test_a_staged_batch_is_the_buffer_batch(make_buffer, clip: bool) -> None:
    buffer = make_buffer()
    indices = np.asarray(buffer.sample_indices(0))
    returns, bootstrap, last = nstep_returns(buffer, indices, N_STEP, GAMMA, clip_rewards=clip)
    staged = stage_transitions(buffer, returns, bootstrap, indices, last, torch.device("cpu"))
    assert isinstance(staged, StagedTransitions) and len(staged) == len(indices)
    rows = torch.tensor([0, len(indices) - 1, 2, 2, 1])
    obs, act, got_returns, got_bootstrap, obs_next = staged.take(rows)
    chosen = indices[rows.numpy()]
    expected_returns, expected_bootstrap, expected_last = nstep_returns(
        buffer, chosen, N_STEP, GAMMA, clip_rewards=clip
    )
    np.testing.assert_array_equal(obs.numpy(), buffer[chosen].obs)
    np.testing.assert_array_equal(obs_next.numpy(), buffer[expected_last].obs_next)
    np.testing.assert_array_equal(act.numpy(), buffer.act[chosen])
    np.testing.assert_allclose(got_returns.numpy(), expected_returns, rtol=1e-6)
    np.testing.assert_allclose(got_bootstrap.numpy(), expected_bootstrap, rtol=1e-6)


def test_every_transition_of_a_frame_stack_buffer_matches() -> None:
    buffer = frame_stack_buffer()
    indices = np.arange(len(buffer))
    returns, bootstrap, last = nstep_returns(buffer, indices, N_STEP, GAMMA)
    staged = stage_transitions(buffer, returns, bootstrap, indices, last, torch.device("cpu"))
    obs, _, _, _, obs_next = staged.take(torch.arange(len(buffer)))
    np.testing.assert_array_equal(obs.numpy(), buffer[indices].obs)  # episode-start padding included
    np.testing.assert_array_equal(obs_next.numpy(), buffer[last].obs_next)


def build(observation_shape: tuple[int, ...]) -> CQLQRDQN:
    space = gym.spaces.Box(-np.inf, np.inf, observation_shape, np.float32)
    config = DiscreteCQLConfig(num_quantiles=4, hidden_sizes=[8], n_step=N_STEP, target_update_freq=0)
    return CQLQRDQN.build(space, gym.spaces.Discrete(3), config)


def test_the_algorithm_learns_from_staged_data_and_restages_a_new_buffer() -> None:
    from tianshou.algorithm.algorithm_base import policy_within_training_step

    algo = build((4,))
    first, second = plain_buffer(), plain_buffer()
    with policy_within_training_step(algo.policy):
        algo.update(first, 5)
        staged = algo._staged
        assert isinstance(staged, StagedTransitions)
        algo.update(first, 5)
        assert algo._staged is staged  # staged once per buffer
        algo.update(second, 5)
        assert algo._staged is not staged
    assert int(algo.num_updates) == 3


def test_a_prioritized_buffer_is_sampled_on_the_host_and_says_so() -> None:
    from tianshou.algorithm.algorithm_base import policy_within_training_step

    plain = plain_buffer()
    buffer = PrioritizedReplayBuffer(len(plain), alpha=0.6, beta=0.4)
    buffer.update(plain)
    algo = build((4,))
    with policy_within_training_step(algo.policy):
        algo.update(buffer, 5)
    assert algo._staged == "a prioritized buffer (its priorities are sampled on the host)"
    assert algo.update_path() == (
        "updates: eager (a prioritized buffer (its priorities are sampled on the host)); " + describe_cpu_products()
    )


def captured_and_eager() -> tuple[CQLQRDQN, CQLQRDQN]:
    """A CUDA algorithm set to capture its (uncompiled) update, and an eager copy of the same state."""
    import copy

    space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    config = DiscreteCQLConfig(num_quantiles=8, hidden_sizes=[16], n_step=N_STEP, target_update_freq=4)
    torch.manual_seed(0)
    captured = CQLQRDQN.build(space, gym.spaces.Discrete(3), config, device="cuda")
    eager = copy.deepcopy(captured)
    captured.capture, captured.compile_update, eager.capture = True, False, False
    return captured, eager


def assert_ten_updates_agree(captured: CQLQRDQN, eager: CQLQRDQN, buffer: ReplayBuffer) -> None:
    """With the same random numbers, the replayed graph's losses and final state are the eager ones."""
    from tianshou.algorithm.algorithm_base import policy_within_training_step

    figures = {}
    for name, algo in (("captured", captured), ("eager", eager)):
        torch.manual_seed(3)
        with policy_within_training_step(algo.policy):
            figures[name] = [algo.update(buffer, 8).loss for _ in range(10)]
    assert any(recording.captured for recording in captured._captured.values())
    np.testing.assert_allclose(figures["captured"], figures["eager"], rtol=1e-4, atol=1e-5)
    for name, value in captured.state_dict().items():
        if isinstance(value, torch.Tensor):
            torch.testing.assert_close(value, eager.state_dict()[name], rtol=1e-4, atol=1e-5, msg=name)
    assert int(captured.num_updates) == captured._host_updates == 10


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_captured_and_eager_discrete_updates_agree() -> None:
    """From the same state and random numbers, the replayed graph does what the eager update does,
    target-network copies included (they happen on the host between replays)."""
    captured, eager = captured_and_eager()
    assert_ten_updates_agree(captured, eager, plain_buffer())
