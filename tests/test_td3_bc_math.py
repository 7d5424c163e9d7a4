"""TD3+BC's loss terms against hand-computed references on tiny networks with fixed weights, and the
properties that define it: the actor follows the first critic against the critics just updated, the
delay, target policy smoothing, time-outs that bootstrap."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from offline_rl.algorithms.staging import Transitions
from offline_rl.algorithms.td3_bc import TD3BC, TD3BCConfig

OBS, ACT = 2, 1


def tiny_algorithm(**overrides) -> TD3BC:
    settings = {"hidden_sizes": [3], "gamma": 0.9, "alpha": 2.5, "normalize_obs": False, "policy_noise": 0.0}
    config = TD3BCConfig(**{**settings, **overrides})
    algo = TD3BC.build(gym.spaces.Box(-10, 10, (OBS,), np.float32), gym.spaces.Box(-1, 1, (ACT,), np.float32), config)
    with torch.no_grad():
        for index, (weight, bias) in enumerate(zip(algo.critic.weights, algo.critic.biases, strict=True)):
            weight.copy_(torch.linspace(-0.8, 0.9, weight.numel()).reshape(weight.shape) * (index + 1))
            bias.copy_(torch.linspace(-0.1, 0.2, bias.numel()).reshape(bias.shape))
        weight = algo.critic.weights[0]
        weight[1] = -weight[1] * 0.7  # the second critic differs from the first,
        algo.critic.biases[-1][1].fill_(-5.0)  # and lies below it: the minimum is never the first
        for index, param in enumerate(algo.actor.net.parameters()):
            param.copy_(torch.linspace(-0.5, 0.6, param.numel()).reshape(param.shape) * (index + 1))
    algo.critic_target.load_state_dict(algo.critic.state_dict())
    algo.actor_target.load_state_dict(algo.actor.state_dict())
    return algo


def reference_q(algo: TD3BC, member: int, obs: np.ndarray, action: np.ndarray) -> float:
    """Q_member(s, a) with explicit loops, read off the stored weights."""
    hidden = np.concatenate([obs, action]).astype(np.float64)
    layers = list(zip(algo.critic.weights, algo.critic.biases, strict=True))
    for depth, (weight, bias) in enumerate(layers):
        w, b = weight[member].detach().double().numpy(), bias[member, 0].detach().double().numpy()
        out = np.array([sum(hidden[i] * w[i, j] for i in range(len(hidden))) + b[j] for j in range(w.shape[1])])
        hidden = out if depth == len(layers) - 1 else np.maximum(out, 0.0)
    return float(hidden[0])


def reference_action(actor: torch.nn.Module, obs: np.ndarray) -> np.ndarray:
    """tanh(f(s)) with explicit loops."""
    linears = [m for m in actor.net if isinstance(m, torch.nn.Linear)]
    hidden = obs.astype(np.float64)
    for depth, linear in enumerate(linears):
        w, b = linear.weight.detach().double().numpy(), linear.bias.detach().double().numpy()
        out = np.array([sum(w[j, i] * hidden[i] for i in range(len(hidden))) + b[j] for j in range(len(b))])
        hidden = out if depth == len(linears) - 1 else np.maximum(out, 0.0)
    return np.tanh(hidden)


OBS_ROWS = np.array([[0.5, -1.0], [1.5, 0.25]], np.float32)
ACT_ROWS = np.array([[0.3], [-0.6]], np.float32)
REW = np.array([1.0, -0.5], np.float32)
NOT_TERMINATED = np.array([1.0, 0.0], np.float32)  # the second row ends its episode; a time-out would be 1
OBS_NEXT = np.array([[0.6, -0.9], [1.2, 0.5]], np.float32)


def batch() -> Transitions:
    columns = (OBS_ROWS, ACT_ROWS, REW, NOT_TERMINATED, OBS_NEXT)
    return Transitions(*(torch.as_tensor(column) for column in columns))


def expected_target(algo: TD3BC) -> np.ndarray:
    targets = []
    for row in range(2):
        next_action = np.clip(reference_action(algo.actor_target, OBS_NEXT[row]), -1, 1)
        next_q = min(reference_q(algo, member, OBS_NEXT[row], next_action) for member in range(2))
        targets.append(REW[row] + 0.9 * NOT_TERMINATED[row] * next_q)
    return np.array(targets)


def test_critic_loss_matches_hand_computation() -> None:
    algo = tiny_algorithm()
    losses = algo.critic_stage(batch(), actor_step=False)
    target = expected_target(algo)
    expected = sum(
        np.mean([(reference_q(algo, e, OBS_ROWS[b], ACT_ROWS[b]) - target[b]) ** 2 for b in range(2)]) for e in range(2)
    )
    assert float(losses.parts["critic"].detach()) == pytest.approx(expected, rel=1e-5)
    assert float(losses.figures["target_q"]) == pytest.approx(target.mean(), rel=1e-5)


def test_a_time_out_bootstraps_and_a_terminal_does_not() -> None:
    algo = tiny_algorithm()
    rew, obs_next = torch.as_tensor(REW), torch.as_tensor(OBS_NEXT)
    ended = algo.td_target(rew, torch.zeros(2), obs_next)
    timed_out = algo.td_target(rew, torch.ones(2), obs_next)
    assert torch.equal(ended, rew)
    assert not torch.allclose(timed_out, rew)


def test_actor_loss_follows_the_first_critic_with_lambda_from_its_scale() -> None:
    algo = tiny_algorithm()
    losses = algo.actor_stage(batch(), actor_step=True)
    actions = [reference_action(algo.actor, OBS_ROWS[b]) for b in range(2)]
    q1 = np.array([reference_q(algo, 0, OBS_ROWS[b], actions[b]) for b in range(2)])
    q2 = np.array([reference_q(algo, 1, OBS_ROWS[b], actions[b]) for b in range(2)])
    assert np.all(q2 < q1)  # a loss taking the minimum (or the second) would differ
    weight = 2.5 / np.abs(q1).mean()
    bc = np.mean([(actions[b] - ACT_ROWS[b]) ** 2 for b in range(2)])
    assert float(losses.parts["actor"].detach()) == pytest.approx(-weight * q1.mean() + bc, rel=1e-5)
    assert float(losses.figures["q_weight"]) == pytest.approx(weight, rel=1e-5)
    assert float(losses.figures["bc_loss"]) == pytest.approx(bc, rel=1e-5)


def test_lambda_is_held_constant_and_the_critics_get_no_gradient_from_the_actor() -> None:
    algo = tiny_algorithm()
    losses = algo.actor_stage(batch(), actor_step=True)
    losses.parts["actor"].backward()
    assert all(param.grad is None for param in algo.critic.parameters())
    # d/dθ of −λ·mean Q with λ a constant: the same gradient as −(λ as a number)·mean Q.
    grads = [param.grad.clone() for param in algo.actor.parameters()]
    algo.actor.zero_grad()
    obs, act = torch.as_tensor(OBS_ROWS), torch.as_tensor(ACT_ROWS)
    action = algo.actor.action(obs)
    q = algo.critic.member_values(obs, action.unsqueeze(1), 0, detach_params=True)[:, 0]
    (-float(losses.figures["q_weight"]) * q.mean() + (action - act).pow(2).mean()).backward()
    for grad, param in zip(grads, algo.actor.parameters(), strict=True):
        assert torch.allclose(grad, param.grad, atol=1e-6)


def test_target_policy_smoothing_clips_the_noise_then_the_action() -> None:
    algo = tiny_algorithm(policy_noise=100.0, noise_clip=0.3)
    obs_next = torch.as_tensor(OBS_NEXT).repeat(500, 1)
    seen = []
    original = algo.critic_target.forward

    def record(obs, actions, **kwargs):
        seen.append(actions.detach().clone())
        return original(obs, actions, **kwargs)

    algo.critic_target.forward = record
    algo.td_target(torch.zeros(1000), torch.ones(1000), obs_next)
    smoothed = seen[0][:, 0, 0].numpy()
    clean = np.tile([reference_action(algo.actor_target, row)[0] for row in OBS_NEXT], 500)
    offsets = smoothed - clean
    low, high = np.maximum(clean - 0.3, -1.0), np.minimum(clean + 0.3, 1.0)
    assert np.all(smoothed >= low - 1e-6) and np.all(smoothed <= high + 1e-6)
    # σ = 100 against a clip of 0.3: nearly every draw lands on the clip, on both sides.
    inside = np.abs(smoothed) < 1.0 - 1e-6  # not clipped by the box
    assert np.mean(np.isclose(np.abs(offsets[inside]), 0.3, atol=1e-5)) > 0.9
    assert offsets.min() < 0 < offsets.max()


def test_the_actor_and_the_targets_move_every_second_update_only() -> None:
    algo = tiny_algorithm(tau=0.5)
    actor, critic_target = copy.deepcopy(algo.actor.state_dict()), copy.deepcopy(algo.critic_target.state_dict())
    assert algo.loss_options() == {"actor_step": False}
    algo.gradient_step(batch())
    assert all(torch.equal(value, algo.actor.state_dict()[key]) for key, value in actor.items())
    assert all(torch.equal(value, algo.critic_target.state_dict()[key]) for key, value in critic_target.items())
    pairs = zip(algo.critic.parameters(), algo.critic_target.parameters(), strict=True)
    assert not all(torch.equal(a, b) for a, b in pairs)  # the critics stepped
    assert algo.loss_options() == {"actor_step": True}
    critic_before_polyak = None

    def remember() -> None:
        nonlocal critic_before_polyak
        critic_before_polyak = [param.detach().clone() for param in algo.critic.parameters()]

    algo.step_critics = (lambda step: lambda: (step(), remember()))(algo.step_critics)
    algo.gradient_step(batch())
    assert not all(torch.equal(value, algo.actor.state_dict()[key]) for key, value in actor.items())
    for target, before, source in zip(
        algo.critic_target.parameters(), critic_target.values(), critic_before_polyak, strict=True
    ):
        assert torch.allclose(target, before + 0.5 * (source - before))


def test_the_actor_learns_against_the_critics_just_updated() -> None:
    """The authors' order: the critics step, then the actor's loss reads the stepped critics (one
    backward pass over both losses would read the critics as the update found them)."""
    algo = tiny_algorithm()
    algo.gradient_step(batch())  # the first update steps the critics only
    actor_before = copy.deepcopy(algo.actor)
    figures = algo.gradient_step(batch())
    obs = torch.as_tensor(OBS_ROWS)
    with torch.no_grad():
        stepped = algo.critic.member_values(obs, actor_before.action(obs).unsqueeze(1), 0)[:, 0].mean()
    assert float(figures["q_policy"]) == pytest.approx(float(stepped), rel=1e-6)


def test_updates_without_an_actor_step_report_its_latest_figures() -> None:
    algo = tiny_algorithm()
    first = algo.gradient_step(batch())
    assert float(first["actor_loss"]) == 0.0  # no actor step yet
    second = algo.gradient_step(batch())
    third = algo.gradient_step(batch())
    assert float(third["actor_loss"]) == float(second["actor_loss"]) != 0.0


def test_n_step_returns_stop_at_episode_ends_and_bootstrap_at_a_time_out() -> None:
    from test_bc_math import episode_buffer

    algo = TD3BC.build(
        gym.spaces.Box(-10, 10, (2,), np.float32),
        gym.spaces.Box(-1, 1, (2,), np.float32),
        TD3BCConfig(hidden_sizes=[4], n_step=3, gamma=0.5, normalize_obs=False),
    )
    # Episodes: rewards 1, 1 (terminated); 10, 10, 10 (cut by a time limit); 3, 3 (terminated).
    dataset = algo.staged(episode_buffer())
    assert dataset.rew.tolist() == [1.5, 1.0, 17.5, 15.0, 10.0, 4.5, 3.0]
    # γ^(k−1)·(1 − terminated) of each window's last step: the target reads R + γ^k·(1 − d)·V(s_{t+k}).
    assert dataset.not_terminated.tolist() == [0.0, 0.0, 0.25, 0.5, 1.0, 0.0, 0.0]
    # s′ after each window: the time-out episode's last observation is [1, 2] + 1
    assert dataset.obs_next[2:5].tolist() == [[2.0, 3.0]] * 3
