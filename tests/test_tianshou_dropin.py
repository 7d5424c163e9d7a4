"""`offline_rl.CQL` / `offline_rl.DiscreteCQL` are built exactly as Tianshou 2.0.1's are, and train."""

from __future__ import annotations

import copy
import inspect

import gymnasium as gym
import numpy as np
import pytest
import tianshou.algorithm as tianshou_algorithms
import torch
from tianshou.algorithm.algorithm_base import policy_within_training_step
from tianshou.algorithm.modelfree.ddpg import ContinuousDeterministicPolicy
from tianshou.algorithm.modelfree.qrdqn import QRDQNPolicy
from tianshou.algorithm.modelfree.sac import AutoAlpha, SACPolicy
from tianshou.algorithm.optim import AdamOptimizerFactory
from tianshou.data import Batch, Collector, PrioritizedReplayBuffer, VectorReplayBuffer
from tianshou.env import DummyVectorEnv
from tianshou.trainer import OfflineTrainerParams
from tianshou.utils.net.common import Net
from tianshou.utils.net.continuous import ContinuousActorDeterministic, ContinuousActorProbabilistic, ContinuousCritic

import offline_rl
import offline_rl.core.resources
from offline_rl.data.action_units import ActionUnitsWarning


@pytest.mark.parametrize("name", ["CQL", "DiscreteCQL", "TD3BC"])
def test_the_drop_ins_take_tianshous_arguments_with_tianshous_defaults(name: str) -> None:
    theirs = inspect.signature(getattr(tianshou_algorithms, name)).parameters
    ours = inspect.signature(getattr(offline_rl, name)).parameters
    for argument, parameter in theirs.items():
        assert argument in ours, f"{name} lacks Tianshou's argument {argument}"
        assert ours[argument].default == parameter.default, argument


def pendulum_parts(hidden: list[int]) -> tuple[SACPolicy, ContinuousCritic, gym.Env]:
    """The networks of Tianshou's test/offline/test_cql.py, by its own constructors."""
    env = gym.make("Pendulum-v1")
    net_a = Net(state_shape=(3,), action_shape=(1,), hidden_sizes=hidden)
    actor = ContinuousActorProbabilistic(
        preprocess_net=net_a, action_shape=(1,), unbounded=True, conditioned_sigma=True
    )
    net_c = Net(state_shape=(3,), action_shape=(1,), hidden_sizes=hidden, concat=True)
    critic = ContinuousCritic(preprocess_net=net_c)
    policy = SACPolicy(actor=actor, action_scaling=False, action_space=env.action_space)
    return policy, critic, env


def collected_pendulum_buffer(steps: int = 300) -> VectorReplayBuffer:
    """What a Tianshou collector stores: a SAC policy's raw actions, in its [-1, 1] box."""
    env = gym.make("Pendulum-v1")
    net = Net(state_shape=(3,), hidden_sizes=[16])
    actor = ContinuousActorProbabilistic(preprocess_net=net, action_shape=(1,), unbounded=True)
    behaviour = SACPolicy(actor=actor, action_space=env.action_space)  # action_scaling=True: env gets ±2
    buffer = VectorReplayBuffer(steps, 2)
    envs = DummyVectorEnv([lambda: gym.make("Pendulum-v1") for _ in range(2)])
    envs.seed(0)
    Collector(behaviour, envs, buffer, exploration_noise=True).collect(n_step=steps, reset_before_collect=True)
    return buffer


def forty_updates_under_tianshous_trainer(algorithm: object, buffer: VectorReplayBuffer) -> object:
    """Tianshou's offline trainer for 40 updates (batch 16) and one evaluation episode on Pendulum; the
    collector's buffer holds the policy's box, which the drop-in says it reads the actions in."""
    test_envs = DummyVectorEnv([lambda: gym.make("Pendulum-v1")])
    with pytest.warns(ActionUnitsWarning, match="Tianshou collectors store"):
        return algorithm.run_training(  # type: ignore[attr-defined]
            OfflineTrainerParams(
                buffer=buffer,
                test_collector=Collector(algorithm, test_envs),  # type: ignore[arg-type]
                max_epochs=1,
                epoch_num_steps=40,
                batch_size=16,
                test_step_num_episodes=1,
                show_progress=False,
                verbose=False,
            )
        )


def test_cql_built_the_tianshou_way_trains_under_tianshous_offline_trainer(monkeypatch: pytest.MonkeyPatch) -> None:
    tuned: list[bool] = []  # a Tianshou script gets the examples' CPU allocator settings from run_training
    monkeypatch.setattr(offline_rl.core.resources, "tune_cpu_allocator", lambda: tuned.append(True) or True)
    torch.manual_seed(0)
    buffer = collected_pendulum_buffer()
    policy, critic, _env = pendulum_parts([16, 16])
    alpha = AutoAlpha(-1.0, 0.0, AdamOptimizerFactory(lr=1e-2))
    algorithm = offline_rl.CQL(
        policy=policy,
        policy_optim=AdamOptimizerFactory(lr=1e-3),
        critic=critic,
        critic_optim=AdamOptimizerFactory(lr=1e-3),
        cql_alpha_lr=1e-2,
        cql_weight=1.0,
        alpha=alpha,
        with_lagrange=True,
        lagrange_threshold=10.0,
        min_action=-2.0,
        max_action=2.0,
    )
    assert algorithm.config.target_action_gap == 10.0 and algorithm.config.calibrated
    assert forty_updates_under_tianshous_trainer(algorithm, buffer).update_step == 40
    assert tuned == [True]
    valid = buffer.sample_indices(0)
    # the collector's raw actions, unscaled (a Pendulum buffer must not shrink to ±0.5)
    np.testing.assert_allclose(algorithm._staged.act.numpy(), buffer.act[valid], rtol=1e-6)
    assert alpha.value != 1.0  # Tianshou's AutoAlpha object is the one being tuned
    assert float(algorithm.lagrange_multiplier.detach()) != 1.0  # α′ moved by dual ascent
    assert algorithm._staged.mc_return is not None  # Cal-QL, Tianshou's default


def test_td3bc_built_the_tianshou_way_trains_under_tianshous_offline_trainer() -> None:
    """Tianshou's test_td3_bc.py networks and arguments (n-step returns included), its trainer."""
    torch.manual_seed(0)
    buffer = collected_pendulum_buffer()
    env = gym.make("Pendulum-v1")
    actor = ContinuousActorDeterministic(
        preprocess_net=Net(state_shape=(3,), hidden_sizes=[16, 16]), action_shape=(1,), max_action=1.0
    )
    critics = [
        ContinuousCritic(preprocess_net=Net(state_shape=(3,), action_shape=(1,), hidden_sizes=[16, 16], concat=True))
        for _ in range(2)
    ]
    policy = ContinuousDeterministicPolicy(actor=actor, action_space=env.action_space)
    algorithm = offline_rl.TD3BC(
        policy=policy,
        policy_optim=AdamOptimizerFactory(lr=1e-3),
        critic=critics[0],
        critic_optim=AdamOptimizerFactory(lr=1e-3),
        critic2=critics[1],
        critic2_optim=AdamOptimizerFactory(lr=1e-3),
        n_step_return_horizon=3,
    )
    assert algorithm.config.n_step == 3 and algorithm.config.policy_freq == 2 and algorithm.action_limit == 1.0
    actor_before = [param.detach().clone() for param in actor.parameters()]
    assert forty_updates_under_tianshous_trainer(algorithm, buffer).update_step == 40
    assert any(not torch.equal(b, a) for b, a in zip(actor_before, actor.parameters(), strict=True))
    valid = buffer.sample_indices(0)
    np.testing.assert_allclose(algorithm._staged.act.numpy(), buffer.act[valid], rtol=1e-6)  # the actor's units
    assert not np.allclose(algorithm._staged.rew.numpy(), buffer.rew[valid])  # three-step returns


def cartpole_prioritized_buffer() -> PrioritizedReplayBuffer:
    rng = np.random.default_rng(0)
    buffer = PrioritizedReplayBuffer(64, alpha=0.6, beta=0.4)
    for t in range(64):
        obs = rng.normal(size=4).astype(np.float32)
        step = Batch(
            obs=obs,
            act=int(rng.integers(2)),
            rew=np.float32(1.0),
            terminated=t % 16 == 15,
            truncated=False,
            obs_next=obs + 0.1,
            info={},
        )
        buffer.add(Batch.stack([step]), buffer_ids=[0])
    return buffer


def qrdqn_policy(seed: int) -> QRDQNPolicy:
    torch.manual_seed(seed)
    net = Net(state_shape=(4,), action_shape=(2,), hidden_sizes=[16], softmax=False, num_atoms=8)
    return QRDQNPolicy(model=net, action_space=gym.spaces.Discrete(2))


def test_discrete_cql_matches_tianshous_update_on_a_prioritized_buffer() -> None:
    """Same networks, same sampled indices: the same loss, the same new priorities, the same weights."""
    settings = {"gamma": 0.9, "num_quantiles": 8, "n_step_return_horizon": 1, "min_q_weight": 5.0}
    ours_policy, theirs_policy = qrdqn_policy(0), qrdqn_policy(0)
    ours = offline_rl.DiscreteCQL(policy=ours_policy, optim=AdamOptimizerFactory(lr=1e-2), **settings)
    theirs = tianshou_algorithms.DiscreteCQL(policy=theirs_policy, optim=AdamOptimizerFactory(lr=1e-2), **settings)
    ours_buffer, theirs_buffer = cartpole_prioritized_buffer(), cartpole_prioritized_buffer()
    theirs_buffer.update_weight(np.arange(64), np.linspace(0.1, 3.0, 64))  # unequal weights and priorities
    ours_buffer.update_weight(np.arange(64), np.linspace(0.1, 3.0, 64))
    np.random.seed(3)
    with policy_within_training_step(theirs.policy):
        their_stats = theirs.update(theirs_buffer, 16)
    np.random.seed(3)
    with policy_within_training_step(ours.policy):
        our_stats = ours.update(ours_buffer, 16)
    assert our_stats.loss == pytest.approx(their_stats.loss, rel=1e-5)
    assert our_stats.qr_loss == pytest.approx(their_stats.qr_loss, rel=1e-5)
    np.testing.assert_allclose(ours_buffer.weight[np.arange(64)], theirs_buffer.weight[np.arange(64)], rtol=1e-5)
    for mine, their in zip(ours_policy.model.parameters(), theirs_policy.model.parameters(), strict=True):
        torch.testing.assert_close(mine, their, rtol=1e-5, atol=1e-6)


def test_discrete_cql_without_a_target_network_bootstraps_from_the_online_one() -> None:
    algorithm = offline_rl.DiscreteCQL(policy=qrdqn_policy(0), optim=AdamOptimizerFactory(lr=1e-3))
    assert algorithm.model_target is None and algorithm.config.target_update_freq == 0
    with_target = offline_rl.DiscreteCQL(
        policy=qrdqn_policy(0), optim=AdamOptimizerFactory(lr=1e-3), target_update_freq=5, num_quantiles=8
    )
    assert with_target.config.double_q and with_target.model_target is not None


def test_cql_clips_each_critic_gradient_like_tianshou() -> None:
    policy, critic, _ = pendulum_parts([8])
    algorithm = offline_rl.CQL(
        policy=policy,
        policy_optim=AdamOptimizerFactory(),
        critic=critic,
        critic_optim=AdamOptimizerFactory(),
        max_grad_norm=0.5,
    )
    reference = copy.deepcopy(algorithm.critic)
    for module in (algorithm.critic, reference):
        for index, parameter in enumerate(module.parameters()):
            parameter.grad = torch.full_like(parameter, float(index + 1))
    algorithm.critic.clip_grad_norm_(0.5)
    for member, expected in zip(algorithm.critic.members, reference.members, strict=True):
        torch.nn.utils.clip_grad_norm_(expected.parameters(), 0.5)
        for mine, theirs in zip(member.parameters(), expected.parameters(), strict=True):
            torch.testing.assert_close(mine.grad, theirs.grad)
    norms = [torch.cat([p.grad.reshape(-1) for p in member.parameters()]).norm() for member in algorithm.critic.members]
    assert all(norm == pytest.approx(0.5, rel=1e-4) for norm in norms)


def test_our_stacked_critics_clip_each_member_separately() -> None:
    from offline_rl.algorithms.networks import EnsembleCritic

    critic = EnsembleCritic(3, 2, [8], num_critics=2)
    for parameter in critic.parameters():
        parameter.grad = torch.ones_like(parameter)
        parameter.grad[1] *= 0.001  # member 1 already small: left alone
    small_before = [parameter.grad[1].clone() for parameter in critic.parameters()]
    critic.clip_grad_norm_(1.0)
    member_norms = torch.stack([p.grad.reshape(2, -1).pow(2).sum(1) for p in critic.parameters()]).sum(0).sqrt()
    assert member_norms[0] == pytest.approx(1.0, rel=1e-4)
    for parameter, before in zip(critic.parameters(), small_before, strict=True):
        torch.testing.assert_close(parameter.grad[1], before)
