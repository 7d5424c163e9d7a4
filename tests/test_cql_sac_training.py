"""CQL-SAC properties over real updates: conservatism, episode ends, Lagrange dual ascent, checkpoints."""

from __future__ import annotations

import itertools

import gymnasium as gym
import numpy as np
import pytest
import torch
from tianshou.algorithm.algorithm_base import policy_within_training_step

from conftest import write_d4rl_file
from offline_rl.algorithms.cql_sac import CQLSAC, CQLSACConfig
from offline_rl.data import load_d4rl
from offline_rl.data.transitions import make_replay_buffer

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def small_config(**overrides) -> CQLSACConfig:
    settings = {
        "actor_hidden_sizes": [32, 32],
        "critic_layers": 2,
        "critic_width": 32,
        "cql_n_actions": 4,
        "actor_lr": 1e-3,
        "critic_lr": 1e-3,
    }
    return CQLSACConfig(**{**settings, **overrides})


def narrow_band_buffer(size: int = 2000, seed: int = 0):
    """Random states, dataset actions confined to [0.3, 0.4]^2, rewards unrelated to actions."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(size, 3)).astype(np.float32)
    return make_replay_buffer(
        obs=obs,
        act=rng.uniform(0.3, 0.4, size=(size, 2)).astype(np.float32),
        rew=rng.normal(size=size).astype(np.float32),
        terminated=rng.random(size) < 0.02,
        truncated=np.zeros(size, bool),
        obs_next=np.roll(obs, -1, axis=0),
    )


def build(config: CQLSACConfig, device: str = "cpu") -> CQLSAC:
    return CQLSAC.build(
        gym.spaces.Box(-np.inf, np.inf, (3,), np.float32),
        gym.spaces.Box(-1, 1, (2,), np.float32),
        config,
        device=device,
    )


def train(algo: CQLSAC, buffer, updates: int, batch_size: int = 64):
    algo.process_buffer(buffer)
    with policy_within_training_step(algo.policy):
        return [algo.update(buffer, batch_size) for _ in range(updates)]


def test_conservatism_pushes_down_out_of_data_actions() -> None:
    torch.manual_seed(0)
    stats = train(build(small_config(cql_weight=5.0)), narrow_band_buffer(), updates=300)
    last = stats[-20:]
    q_data = np.mean([s.q_data for s in last])
    q_random = np.mean([s.q_random for s in last])
    assert q_random < q_data - 0.5, (q_random, q_data)


def test_without_the_conservative_term_random_actions_are_not_pushed_down() -> None:
    torch.manual_seed(0)
    stats = train(build(small_config(cql_weight=0.0)), narrow_band_buffer(), updates=300)
    last = stats[-20:]
    gap = np.mean([s.q_data for s in last]) - np.mean([s.q_random for s in last])
    assert abs(gap) < 0.5, gap  # the contrast with the test above is the conservative term's doing


def test_terminals_cut_the_td_target_and_timeouts_do_not(tmp_path) -> None:
    obs = np.arange(12, dtype=np.float32).reshape(4, 3)
    path = write_d4rl_file(
        tmp_path / "ends.hdf5",
        observations=obs,
        actions=np.zeros((4, 2), np.float32),
        rewards=np.array([1.0, 2.0, 3.0, 4.0], np.float32),
        terminals=np.array([0, 1, 0, 0], bool),
        timeouts=np.array([0, 0, 0, 1], bool),
        next_observations=obs + 1,
    )
    buffer = load_d4rl(path)
    algo = build(small_config(gamma=0.5, reward_scale=1.0))
    algo.process_buffer(buffer)

    class ConstantCritic(torch.nn.Module):
        def forward(self, obs, actions, detach_params=False):
            return torch.full((2, obs.shape[0], actions.shape[1]), 10.0)

    algo.critic_target = ConstantCritic()
    data = algo._staged
    assert data is not None
    index = torch.arange(4)
    _obs_t, _act_t, rew_t, not_terminated, obs_next, _ = data.take(index)
    target = algo.td_target(rew_t, not_terminated, obs_next, torch.zeros(4, 1, 2), torch.zeros(4, 1), torch.tensor(0.0))
    np.testing.assert_allclose(target.numpy(), [1 + 5, 2, 3 + 5, 4 + 5])  # the time-out step still bootstraps


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("target_gap, direction", [(-100.0, 1), (100.0, -1)])
def test_lagrange_multiplier_follows_the_gap_on_the_algorithms_device(device, target_gap, direction) -> None:
    torch.manual_seed(0)
    algo = build(small_config(with_lagrange=True, target_action_gap=target_gap, lagrange_lr=0.05), device)
    assert algo.log_lagrange_multiplier.device.type == torch.device(device).type
    before = algo.log_lagrange_multiplier.item()
    stats = train(algo, narrow_band_buffer(500), updates=5)
    after = algo.log_lagrange_multiplier.item()
    assert (after - before) * direction > 0.1, (before, after)
    # The logged α′ is the one each update used: it moves the same way, update after update.
    logged = [s.lagrange_multiplier for s in stats]
    assert all((later - earlier) * direction > 0 for earlier, later in itertools.pairwise(logged))


def test_lagrange_multiplier_is_capped() -> None:
    algo = build(small_config(with_lagrange=True))
    with torch.no_grad():
        algo.log_lagrange_multiplier.fill_(20.0)
    assert algo.lagrange_multiplier.item() == pytest.approx(1e6)


def test_entropy_temperature_is_tuned_towards_the_target() -> None:
    torch.manual_seed(0)
    algo = build(small_config(auto_alpha=True, alpha=1.0, alpha_lr=0.05))
    stats = train(algo, narrow_band_buffer(500), updates=20)
    assert stats[-1].alpha != pytest.approx(1.0)
    fixed = build(small_config(auto_alpha=False, alpha=0.2))
    assert train(fixed, narrow_band_buffer(500), updates=3)[-1].alpha == pytest.approx(0.2)


def test_normaliser_is_fitted_on_the_data_and_used_at_evaluation() -> None:
    buffer = narrow_band_buffer()
    algo = build(small_config())
    algo.process_buffer(buffer)
    np.testing.assert_allclose(algo.normalizer.mean.numpy(), buffer.obs.mean(axis=0), atol=1e-5)
    raw = np.array([[1.0, 2.0, 3.0]], np.float32)
    (loc, _), _ = algo.actor(raw)
    expected, _ = algo.actor.distribution_params(algo.normalizer(torch.as_tensor(raw)))
    torch.testing.assert_close(loc, expected)


def test_checkpoint_restores_everything_a_resumed_run_needs() -> None:
    buffer = narrow_band_buffer()
    torch.manual_seed(0)
    original = build(small_config(with_lagrange=True, auto_alpha=True))
    train(original, buffer, updates=7)
    state = original.state_dict()
    restored = build(small_config(with_lagrange=True, auto_alpha=True))
    restored.load_state_dict(state)
    assert int(restored.num_updates) == 7
    assert bool(restored.normalizer.fitted)
    assert restored.log_alpha.item() == original.log_alpha.item()
    assert restored.log_lagrange_multiplier.item() == original.log_lagrange_multiplier.item()
    assert restored._critic_optims[0].state_dict()["state"][0]["step"].item() == 7
    # The same seed now gives the same next update in both.
    torch.manual_seed(1)
    a = train(original, buffer, updates=1)[0]
    torch.manual_seed(1)
    b = train(restored, buffer, updates=1)[0]
    assert a.critic_loss == pytest.approx(b.critic_loss, rel=1e-6)
    assert a.actor_loss == pytest.approx(b.actor_loss, rel=1e-6)
    # A resumed run keeps its fitted normaliser rather than refitting on new data.
    mean_before = restored.normalizer.mean.clone()
    restored.process_buffer(narrow_band_buffer(seed=5))
    torch.testing.assert_close(restored.normalizer.mean, mean_before)


def test_policy_evaluates_inside_the_env_bounds() -> None:
    env = gym.make("Pendulum-v1")
    algo = CQLSAC.build(env.observation_space, env.action_space, small_config())
    from tianshou.data import Collector
    from tianshou.env import DummyVectorEnv

    collector = Collector(algo.policy, DummyVectorEnv([lambda: gym.make("Pendulum-v1")]))
    collector.reset()
    stats = collector.collect(n_episode=1)
    assert stats.n_collected_episodes == 1 and len(stats.returns) == 1
