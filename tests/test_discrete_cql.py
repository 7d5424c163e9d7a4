"""Discrete CQL on QR-DQN: loss against hand computations, n-step windows, conservatism, evaluation."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from tianshou.algorithm.algorithm_base import policy_within_training_step

from offline_rl.algorithms.discrete_cql import CQLQRDQN, DiscreteCQLConfig, nstep_returns
from offline_rl.algorithms.discrete_cql.algorithm import clips_rewards, quantile_huber_loss
from offline_rl.data.transitions import make_replay_buffer


def test_quantile_huber_loss_by_hand() -> None:
    current = torch.tensor([[0.0, 2.0]])  # θ_0, θ_1 with τ̂ = 0.25, 0.75
    target = torch.tensor([[1.0, 0.5]])
    expected = 0.0
    for i, (theta, tau) in enumerate(zip([0.0, 2.0], [0.25, 0.75], strict=True)):
        per_target = []
        for t in (1.0, 0.5):
            u = t - theta
            huber = 0.5 * u * u if abs(u) <= 1 else abs(u) - 0.5
            per_target.append(abs(tau - (1.0 if u < 0 else 0.0)) * huber)
        expected += sum(per_target) / 2
        assert i in (0, 1)
    assert quantile_huber_loss(current, target)[0].item() == pytest.approx(expected)


def tiny_algorithm(**overrides) -> CQLQRDQN:
    settings = {
        "num_quantiles": 3,
        "gamma": 0.9,
        "cql_weight": 2.0,
        "target_update_freq": 1000,
        "hidden_sizes": [3],
        "eps_test": 0.0,
    }
    algo = CQLQRDQN.build(
        gym.spaces.Box(-1, 1, (2,), np.float32),
        gym.spaces.Discrete(2),
        DiscreteCQLConfig(**{**settings, **overrides}),
    )
    with torch.no_grad():
        for index, parameter in enumerate(algo.model.parameters()):
            parameter.copy_(torch.linspace(-0.7, 0.8, parameter.numel()).reshape(parameter.shape) * (1 + index))
    algo.model_target.load_state_dict(algo.model.state_dict())
    return algo


def reference_quantiles(algo: CQLQRDQN, obs: np.ndarray) -> np.ndarray:
    """(A, Nq) quantiles from the stored weights with explicit loops."""
    linears = [m for m in algo.model.net if isinstance(m, torch.nn.Linear)]
    hidden = obs.astype(np.float64)
    for depth, layer in enumerate(linears):
        w, b = layer.weight.detach().double().numpy(), layer.bias.detach().double().numpy()
        out = np.array([sum(w[j, i] * hidden[i] for i in range(len(hidden))) + b[j] for j in range(len(b))])
        hidden = out if depth == len(linears) - 1 else np.maximum(out, 0)
    return hidden.reshape(2, 3)


def test_loss_matches_hand_computation() -> None:
    algo = tiny_algorithm()
    obs = np.array([[0.3, -0.8], [1.0, 0.5]], np.float32)
    obs_next = np.array([[0.1, 0.2], [-0.5, 0.9]], np.float32)
    act = np.array([1, 0])
    returns, bootstrap = np.array([1.0, -0.5]), np.array([0.9, 0.0])
    losses = algo.compute_losses(
        (
            obs,
            torch.as_tensor(act),
            torch.tensor(returns, dtype=torch.float32),
            torch.tensor(bootstrap, dtype=torch.float32),
            obs_next,
        )
    ).figures
    tau = [(i + 0.5) / 3 for i in range(3)]
    qr, cql = [], []
    for b in range(2):
        theta = reference_quantiles(algo, obs[b])
        nxt = reference_quantiles(algo, obs_next[b])
        best = int(np.argmax(nxt.mean(axis=1)))
        target = returns[b] + bootstrap[b] * nxt[best]
        total = 0.0
        for i in range(3):
            for j in range(3):
                u = target[j] - theta[act[b], i]
                huber = 0.5 * u * u if abs(u) <= 1 else abs(u) - 0.5
                total += abs(tau[i] - (u < 0)) * huber / 3
        qr.append(total)
        q = theta.mean(axis=1)
        cql.append(math.log(sum(math.exp(v) for v in q)) - q[act[b]])
    assert losses["qr_loss"].item() == pytest.approx(np.mean(qr), rel=1e-5)
    assert losses["cql_loss"].item() == pytest.approx(np.mean(cql), rel=1e-5)
    assert losses["loss"].item() == pytest.approx(np.mean(qr) + 2.0 * np.mean(cql), rel=1e-5)


def episode_buffer():
    # episode 1: steps 0-2, terminated; episode 2: steps 3-4, truncated; episode 3: steps 5-7.
    rew = np.array([1, 2, 3, 10, 20, 100, 200, 300], np.float32)
    terminated = np.array([0, 0, 1, 0, 0, 0, 0, 1], bool)
    truncated = np.array([0, 0, 0, 0, 1, 0, 0, 0], bool)
    obs = np.arange(8, dtype=np.float32)[:, None].repeat(2, axis=1)
    return make_replay_buffer(
        obs=obs, act=np.zeros(8, np.int64), rew=rew, terminated=terminated, truncated=truncated, obs_next=obs + 0.5
    )


def test_nstep_returns_stop_at_episode_ends() -> None:
    buffer = episode_buffer()
    returns, bootstrap, last = nstep_returns(buffer, np.array([0, 1, 2, 3, 4, 5]), n_step=3, gamma=0.5)
    np.testing.assert_allclose(returns, [1 + 1 + 0.75, 2 + 1.5, 3, 10 + 10, 20, 100 + 100 + 75])
    np.testing.assert_array_equal(last, [2, 2, 2, 4, 4, 7])
    # terminated windows do not bootstrap; the truncated one does, with γ^m for its m steps
    np.testing.assert_allclose(bootstrap, [0, 0, 0, 0.25, 0.5, 0])


def test_conservatism_lifts_the_dataset_action_over_the_others() -> None:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    size = 1000
    obs = rng.normal(size=(size, 4)).astype(np.float32)
    buffer = make_replay_buffer(
        obs=obs,
        act=np.full(size, 2, np.int64),
        rew=rng.normal(size=size).astype(np.float32),
        terminated=rng.random(size) < 0.05,
        truncated=np.zeros(size, bool),
        obs_next=np.roll(obs, -1, 0),
    )
    algo = CQLQRDQN.build(
        gym.spaces.Box(-5, 5, (4,), np.float32),
        gym.spaces.Discrete(4),
        DiscreteCQLConfig(
            num_quantiles=8, lr=1e-3, cql_weight=1.0, target_update_freq=50, hidden_sizes=[32], eps_test=0.0
        ),
    )
    with policy_within_training_step(algo.policy):
        for _ in range(150):
            algo.update(buffer, 64)
    with torch.no_grad():
        q = algo.model(obs[:200])[0].mean(dim=2)
    others = q[:, [0, 1, 3]].max(dim=1).values
    assert (q[:, 2] > others).float().mean() > 0.95


def test_target_network_is_copied_every_target_update_freq() -> None:
    algo = tiny_algorithm(target_update_freq=3, lr=0.1)
    buffer = episode_buffer()
    with policy_within_training_step(algo.policy):
        algo.update(buffer, 4)
        assert not all(
            torch.equal(a, b) for a, b in zip(algo.model.parameters(), algo.model_target.parameters(), strict=True)
        )
        algo.update(buffer, 4)
        algo.update(buffer, 4)
    assert all(torch.equal(a, b) for a, b in zip(algo.model.parameters(), algo.model_target.parameters(), strict=True))


def test_policy_plays_in_a_tianshou_collector() -> None:
    from tianshou.data import Collector
    from tianshou.env import DummyVectorEnv

    env = gym.make("CartPole-v1")
    algo = CQLQRDQN.build(env.observation_space, env.action_space, DiscreteCQLConfig(num_quantiles=4))
    collector = Collector(algo.policy, DummyVectorEnv([lambda: gym.make("CartPole-v1")]))
    collector.reset()
    assert collector.collect(n_episode=2).n_collected_episodes == 2


def test_reward_clipping_clips_each_reward_before_the_sum_and_leaves_the_data_alone() -> None:
    buffer = episode_buffer()
    returns, _, _ = nstep_returns(buffer, np.array([3, 5]), n_step=3, gamma=0.5, clip_rewards=True)
    np.testing.assert_allclose(returns, [1 + 0.5, 1 + 0.5 + 0.25])  # 10, 20 / 100, 200, 300 become 1
    assert buffer.rew[5] == 100  # stored data unchanged


def test_reward_clipping_is_the_atari_default_and_reaches_the_learner(monkeypatch: pytest.MonkeyPatch) -> None:
    from offline_rl.algorithms.discrete_cql import algorithm as discrete_algorithm
    from offline_rl.cli.atari_cql import AtariCQLConfig
    from offline_rl.cli.flags import parse_config

    frames = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    vector = gym.spaces.Box(-1, 1, (4,), np.float32)
    assert DiscreteCQLConfig().reward_clip is None and AtariCQLConfig().algorithm.reward_clip is None
    assert clips_rewards(DiscreteCQLConfig(), frames)  # Atari: the published protocol
    assert not clips_rewards(DiscreteCQLConfig(), vector)  # CartPole and friends keep their rewards
    assert not clips_rewards(DiscreteCQLConfig(), None)  # a drop-in policy without spaces
    assert clips_rewards(DiscreteCQLConfig(reward_clip=True), vector)
    unclipped = parse_config(AtariCQLConfig(), ["--no-reward-clip"], prog="atari_cql.py", description="")
    assert not clips_rewards(unclipped.algorithm, frames)
    seen = []
    original = discrete_algorithm.nstep_returns

    def spy(*args, **kwargs):
        seen.append(kwargs["clip_rewards"])
        return original(*args, **kwargs)

    monkeypatch.setattr(discrete_algorithm, "nstep_returns", spy)
    algo = tiny_algorithm(reward_clip=True)
    with policy_within_training_step(algo.policy):
        algo.update(episode_buffer(), 4)
    assert seen == [True]


def test_the_cnn_sees_uint8_frames_as_float_then_divided_by_255() -> None:
    """Its input conversion (channels-last bytes, then one division) changes no value: the logits equal
    those of the frames converted the plain way, bit for bit, and float frames are taken as well."""
    from offline_rl.algorithms.discrete_cql.networks import QuantileNatureCNN

    torch.manual_seed(0)
    net = QuantileNatureCNN((4, 84, 84), num_actions=3, num_quantiles=5)
    frames = torch.randint(0, 256, (6, 4, 84, 84), dtype=torch.uint8)
    plain = (frames.float() / 255.0).contiguous(memory_format=torch.channels_last)
    expected = net.head(net.features(plain)).view(-1, 3, 5)
    assert torch.equal(net(frames)[0], expected)
    assert torch.equal(net(frames.numpy())[0], expected)
    assert torch.equal(net(frames.double())[0], expected)  # any dtype ends as float32
    unscaled = QuantileNatureCNN((4, 84, 84), num_actions=3, num_quantiles=5, scale_obs=False)
    unscaled.load_state_dict(net.state_dict())
    assert torch.equal(unscaled(plain)[0], expected)
