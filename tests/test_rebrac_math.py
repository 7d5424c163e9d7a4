"""ReBRAC's loss terms against hand-computed references on tiny networks with fixed weights, and what
sets it apart from TD3+BC: the critic penalty on the data's next action (zero where the data has none),
the actor penalty summed over action dims with λ = 1 / mean|min Q|, layer-normalised critics, the actor
stepping on the first update of each pair, the authors' initialisation."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from test_bc_math import episode_buffer

from offline_rl.algorithms.networks import EnsembleCritic
from offline_rl.algorithms.rebrac import ReBRAC, ReBRACConfig
from offline_rl.algorithms.staging import Transitions, TransitionsWithNextActions

OBS, ACT = 2, 2
OBS_ROWS = np.array([[0.5, -1.0], [1.5, 0.25], [-0.4, 0.9]], np.float32)
ACT_ROWS = np.array([[0.3, -0.2], [-0.6, 0.5], [0.1, 0.0]], np.float32)
REW = np.array([1.0, -0.5, 0.25], np.float32)
NOT_TERMINATED = np.array([1.0, 0.0, 1.0], np.float32)
OBS_NEXT = np.array([[0.6, -0.9], [1.2, 0.5], [0.0, 0.3]], np.float32)
NEXT_ACT = np.array([[0.2, 0.1], [0.0, 0.0], [-0.5, 0.4]], np.float32)
KNOWN = np.array([1.0, 0.0, 0.0], np.float32)  # row 2: a time-out, no next action in the data


def tiny_rebrac(**overrides) -> ReBRAC:
    settings = {"hidden_sizes": [3], "gamma": 0.9, "policy_noise": 0.0, "actor_bc_weight": 0.4}
    config = ReBRACConfig(**{**settings, "critic_bc_weight": 0.7, **overrides})
    algo = ReBRAC.build(gym.spaces.Box(-10, 10, (OBS,), np.float32), gym.spaces.Box(-1, 1, (ACT,), np.float32), config)
    with torch.no_grad():
        for index, (weight, bias) in enumerate(zip(algo.critic.weights, algo.critic.biases, strict=True)):
            weight.copy_(torch.linspace(-0.8, 0.9, weight.numel()).reshape(weight.shape) * (index + 1))
            bias.copy_(torch.linspace(-0.1, 0.2, bias.numel()).reshape(bias.shape))
        algo.critic.weights[0][1].mul_(-0.6)
        for scale, shift in zip(algo.critic.norm_scales, algo.critic.norm_shifts, strict=True):
            scale.copy_(torch.linspace(0.5, 1.5, scale.numel()).reshape(scale.shape))
            shift.copy_(torch.linspace(-0.3, 0.3, shift.numel()).reshape(shift.shape))
        for index, param in enumerate(algo.actor.net.parameters()):
            param.copy_(torch.linspace(-0.5, 0.6, param.numel()).reshape(param.shape) * (index + 1))
    algo.critic_target.load_state_dict(algo.critic.state_dict())
    algo.actor_target.load_state_dict(algo.actor.state_dict())
    return algo


def reference_q(critic: EnsembleCritic, member: int, obs: np.ndarray, action: np.ndarray) -> float:
    """Q_member(s, a) with explicit loops, each hidden layer ReLU then layer norm (ε = 1e-6)."""
    hidden = np.concatenate([obs, action]).astype(np.float64)
    layers = list(zip(critic.weights, critic.biases, strict=True))
    for depth, (weight, bias) in enumerate(layers):
        w, b = weight[member].detach().double().numpy(), bias[member, 0].detach().double().numpy()
        out = np.array([sum(hidden[i] * w[i, j] for i in range(len(hidden))) + b[j] for j in range(w.shape[1])])
        if depth == len(layers) - 1:
            return float(out[0])
        out = np.maximum(out, 0.0)
        if critic.layer_norm:
            scale = critic.norm_scales[depth][member, 0].detach().double().numpy()
            shift = critic.norm_shifts[depth][member, 0].detach().double().numpy()
            out = (out - out.mean()) / np.sqrt(out.var() + 1e-6) * scale + shift
        hidden = out
    raise AssertionError


def reference_action(actor: torch.nn.Module, obs: np.ndarray) -> np.ndarray:
    linears = [m for m in actor.net if isinstance(m, torch.nn.Linear)]
    hidden = obs.astype(np.float64)
    for depth, linear in enumerate(linears):
        out = linear.weight.detach().double().numpy() @ hidden + linear.bias.detach().double().numpy()
        hidden = out if depth == len(linears) - 1 else np.maximum(out, 0.0)
    return np.tanh(hidden)


def batch() -> TransitionsWithNextActions:
    columns = (OBS_ROWS, ACT_ROWS, REW, NOT_TERMINATED, OBS_NEXT)
    transitions = Transitions(*(torch.as_tensor(column) for column in columns))
    return TransitionsWithNextActions(transitions, torch.as_tensor(NEXT_ACT), torch.as_tensor(KNOWN))


def test_the_critic_loss_and_its_penalised_target_match_hand_computation() -> None:
    algo = tiny_rebrac()
    targets = []
    for row in range(3):
        next_action = reference_action(algo.actor_target, OBS_NEXT[row])
        next_q = min(reference_q(algo.critic_target, e, OBS_NEXT[row], next_action) for e in range(2))
        penalty = 0.7 * ((next_action - NEXT_ACT[row]) ** 2).sum() * KNOWN[row]
        targets.append(REW[row] + 0.9 * NOT_TERMINATED[row] * (next_q - penalty))
    expected = sum(
        np.mean([(reference_q(algo.critic, e, OBS_ROWS[b], ACT_ROWS[b]) - targets[b]) ** 2 for b in range(3)])
        for e in range(2)
    )
    losses = algo.critic_stage(batch(), actor_step=False)
    assert float(losses.parts["critic"].detach()) == pytest.approx(expected, rel=1e-5)
    assert float(losses.figures["target_q"]) == pytest.approx(np.mean(targets), rel=1e-5)


def test_no_penalty_where_the_data_has_no_next_action_and_time_outs_bootstrap() -> None:
    algo = tiny_rebrac()
    rew, obs_next, next_act = torch.as_tensor(REW), torch.as_tensor(OBS_NEXT), torch.as_tensor(NEXT_ACT)
    unknown, _ = algo.penalized_target(rew, torch.ones(3), obs_next, next_act, torch.zeros(3))
    plain = algo.td_target(rew, torch.ones(3), obs_next)  # TD3's target: no penalty
    assert torch.allclose(unknown, plain)
    known, penalty = algo.penalized_target(rew, torch.ones(3), obs_next, next_act, torch.ones(3))
    assert float(penalty) > 0 and torch.all(known < plain)
    ended, _ = algo.penalized_target(rew, torch.zeros(3), obs_next, next_act, torch.ones(3))
    assert torch.equal(ended, rew)


@pytest.mark.parametrize("normalize_q", [True, False])
def test_the_actor_loss_matches_hand_computation(normalize_q: bool) -> None:
    algo = tiny_rebrac(normalize_q=normalize_q)
    actions = [reference_action(algo.actor, OBS_ROWS[b]) for b in range(3)]
    q = np.array([min(reference_q(algo.critic, e, OBS_ROWS[b], actions[b]) for e in range(2)) for b in range(3)])
    weight = 1.0 / np.abs(q).mean() if normalize_q else 1.0
    penalty = np.array([((actions[b] - ACT_ROWS[b]) ** 2).sum() for b in range(3)])
    losses = algo.actor_stage(batch(), actor_step=True)
    assert float(losses.parts["actor"].detach()) == pytest.approx(np.mean(0.4 * penalty - weight * q), rel=1e-5)
    assert float(losses.figures["bc_loss"]) == pytest.approx(penalty.mean(), rel=1e-5)


def test_the_actor_steps_on_the_first_update_of_each_pair() -> None:
    algo = tiny_rebrac()
    steps = []
    for _ in range(5):
        steps.append(algo.loss_options()["actor_step"])
        before = [param.detach().clone() for param in algo.actor.parameters()]
        algo.gradient_step(batch())
        moved = any(not torch.equal(b, a) for b, a in zip(before, algo.actor.parameters(), strict=True))
        assert moved == steps[-1]
    assert steps == [True, False, True, False, True]


def test_a_layer_normalised_critic_matches_its_reference_and_the_plain_one_has_no_norm_parameters() -> None:
    critic = EnsembleCritic(2, 1, [4, 3], 2, orthogonal_init=False, layer_norm=True)
    with torch.no_grad():
        for scale in critic.norm_scales:
            scale.uniform_(0.5, 1.5)
    obs, act = np.array([[0.3, -0.7]], np.float32), np.array([[[0.2]]], np.float32)
    q = critic(torch.as_tensor(obs), torch.as_tensor(act)).detach()
    for member in range(2):
        assert float(q[member, 0, 0]) == pytest.approx(reference_q(critic, member, obs[0], act[0, 0]), rel=1e-5)
    plain = EnsembleCritic(2, 1, [4, 3], 2)
    assert not any("norm" in name for name, _ in plain.named_parameters())


def test_the_authors_initialisation() -> None:
    algo = ReBRAC.build(gym.spaces.Box(-1, 1, (5,), np.float32), gym.spaces.Box(-1, 1, (2,), np.float32))
    linears = [m for m in algo.actor.net if isinstance(m, torch.nn.Linear)]
    assert all(torch.all(m.bias == 0.1) for m in linears[:-1]) and linears[-1].weight.abs().max() <= 1e-3
    assert all(torch.all(bias == 0.1) for bias in algo.critic.biases[:-1])
    assert algo.critic.weights[-1].abs().max() <= 3e-3 and algo.critic.weights[0].abs().max() <= 1 / np.sqrt(7)
    assert algo.critic.layer_norm and len(algo.critic.norm_scales) == 3


def test_the_staged_next_action_is_the_datas_own_and_unknown_at_every_episode_end() -> None:
    algo = ReBRAC.build(gym.spaces.Box(-10, 10, (2,), np.float32), gym.spaces.Box(-1, 1, (2,), np.float32))
    dataset = algo.staged(episode_buffer())  # episodes of 2 (terminated), 3 (timed out), 2 (terminated) steps
    assert dataset.next_act_known.tolist() == [1, 0, 1, 1, 0, 1, 0]
    assert torch.equal(dataset.next_act[[0, 2, 3, 5]], dataset.act[[1, 3, 4, 6]])
    sampled = dataset.sample(8)
    assert isinstance(sampled, TransitionsWithNextActions)
