"""IQL's loss terms against hand-computed references on tiny networks with fixed weights, and its
defining properties: V is an expectile of the target critics, the critics bootstrap from V (time-outs
too), the actor's weights are exp(β·A) clipped, the actor's rate follows CORL's cosine schedule."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from offline_rl.algorithms.iql import IQL, IQLConfig
from offline_rl.algorithms.staging import Transitions

OBS, ACT = 2, 1
OBS_ROWS = np.array([[0.5, -1.0], [1.5, 0.25], [-0.4, 0.9]], np.float32)
ACT_ROWS = np.array([[0.3], [-0.6], [0.1]], np.float32)
REW = np.array([1.0, -0.5, 0.25], np.float32)
NOT_TERMINATED = np.array([1.0, 0.0, 1.0], np.float32)
OBS_NEXT = np.array([[0.6, -0.9], [1.2, 0.5], [0.0, 0.3]], np.float32)


def tiny_iql(**overrides) -> IQL:
    settings = {"hidden_sizes": [3], "gamma": 0.9, "normalize_obs": False, "expectile": 0.8, "temperature": 2.0}
    config = IQLConfig(**{**settings, **overrides})
    algo = IQL.build(gym.spaces.Box(-10, 10, (OBS,), np.float32), gym.spaces.Box(-1, 1, (ACT,), np.float32), config)
    with torch.no_grad():
        for net, scale in ((algo.critic, 1.0), (algo.value, -0.7)):
            for index, (weight, bias) in enumerate(zip(net.weights, net.biases, strict=True)):
                weight.copy_(torch.linspace(-0.8, 0.9, weight.numel()).reshape(weight.shape) * (index + 1) * scale)
                bias.copy_(torch.linspace(-0.1, 0.2, bias.numel()).reshape(bias.shape))
        algo.critic.weights[0][1].mul_(-0.6)
        for index, param in enumerate(algo.actor.net.parameters()):
            param.copy_(torch.linspace(-0.5, 0.6, param.numel()).reshape(param.shape) * (index + 1))
        if hasattr(algo.actor, "log_std"):
            algo.actor.log_std.fill_(-0.3)
    algo.critic_target.load_state_dict(algo.critic.state_dict())
    return algo


def mlp(weights: list[np.ndarray], biases: list[np.ndarray], inputs: np.ndarray) -> float:
    hidden = inputs.astype(np.float64)
    for depth, (w, b) in enumerate(zip(weights, biases, strict=True)):
        out = np.array([sum(hidden[i] * w[i, j] for i in range(len(hidden))) + b[j] for j in range(w.shape[1])])
        hidden = out if depth == len(weights) - 1 else np.maximum(out, 0.0)
    return float(hidden[0])


def ensemble_value(net, member: int, inputs: np.ndarray) -> float:
    weights = [w[member].detach().double().numpy() for w in net.weights]
    biases = [b[member, 0].detach().double().numpy() for b in net.biases]
    return mlp(weights, biases, inputs)


def actor_mean(algo: IQL, obs: np.ndarray) -> np.ndarray:
    linears = [m for m in algo.actor.net if isinstance(m, torch.nn.Linear)]
    weights = [m.weight.detach().double().numpy().T for m in linears]
    biases = [m.bias.detach().double().numpy() for m in linears]
    hidden = obs.astype(np.float64)
    for depth, (w, b) in enumerate(zip(weights, biases, strict=True)):
        out = hidden @ w + b
        hidden = out if depth == len(weights) - 1 else np.maximum(out, 0.0)
    return np.tanh(hidden)


def batch() -> Transitions:
    columns = (OBS_ROWS, ACT_ROWS, REW, NOT_TERMINATED, OBS_NEXT)
    return Transitions(*(torch.as_tensor(column) for column in columns))


def reference(algo: IQL) -> dict[str, float]:
    cfg = algo.config
    rows = range(len(REW))
    v = np.array([ensemble_value(algo.value, 0, OBS_ROWS[b]) for b in rows])
    sa = [np.concatenate([OBS_ROWS[b], ACT_ROWS[b]]) for b in rows]
    q = np.array([[ensemble_value(algo.critic, e, sa[b]) for b in rows] for e in range(2)])
    advantage = q.min(axis=0) - v  # the target critics equal the critics here
    value_loss = np.mean(np.abs(cfg.expectile - (advantage < 0)) * advantage**2)
    y = REW + 0.9 * NOT_TERMINATED * np.array([ensemble_value(algo.value, 0, OBS_NEXT[b]) for b in rows])
    critic_loss = np.mean((q - y) ** 2)
    weights = np.minimum(np.exp(cfg.temperature * advantage), cfg.max_weight)
    means = np.array([actor_mean(algo, OBS_ROWS[b]) for b in rows])
    if cfg.deterministic_actor:
        behaviour = ((means - ACT_ROWS) ** 2).sum(axis=1)
    else:
        sigma = math.exp(-0.3)
        z = (ACT_ROWS - means) / sigma
        behaviour = -(-0.5 * z**2 - math.log(sigma) - 0.5 * math.log(2 * math.pi)).sum(axis=1)
    return {
        "value_loss": value_loss,
        "critic_loss": critic_loss,
        "actor_loss": float(np.mean(weights * behaviour)),
        "advantage": float(advantage.mean()),
    }


@pytest.mark.parametrize("deterministic", [False, True], ids=["gaussian actor", "deterministic actor"])
def test_every_loss_matches_hand_computation(deterministic: bool) -> None:
    algo = tiny_iql(deterministic_actor=deterministic)
    losses = algo.compute_losses(batch())
    expected = reference(algo)
    for name in ("value_loss", "critic_loss", "actor_loss"):
        assert float(losses.figures[name]) == pytest.approx(expected[name], rel=1e-5), name
    assert float(losses.figures["advantage"]) == pytest.approx(expected["advantage"], rel=1e-5, abs=1e-7)


def test_the_advantage_weights_are_clipped() -> None:
    algo = tiny_iql(temperature=50.0, max_weight=1.5)
    losses = algo.compute_losses(batch())
    expected = reference(algo)
    assert float(losses.figures["actor_loss"]) == pytest.approx(expected["actor_loss"], rel=1e-5)
    assert float(losses.figures["weight"]) <= 1.5


def test_the_expectile_weighs_positive_errors_by_tau() -> None:
    algo = tiny_iql(expectile=0.9)
    u = torch.tensor([2.0, -1.0])
    assert float(algo.value_loss(u)) == pytest.approx((0.9 * 4 + 0.1 * 1) / 2)


def test_a_time_out_bootstraps_from_v_and_a_terminal_does_not() -> None:
    algo = tiny_iql()
    rew, obs_next = torch.as_tensor(REW), torch.as_tensor(OBS_NEXT)
    assert torch.equal(algo.td_target(rew, torch.zeros(3), obs_next), rew)
    bootstrapped = algo.td_target(rew, torch.ones(3), obs_next)
    assert torch.allclose(bootstrapped, rew + 0.9 * algo.state_value(obs_next).detach())


def test_each_loss_reaches_its_own_network_only() -> None:
    algo = tiny_iql()
    for name in ("value", "critic", "actor"):
        algo.zero_grad(set_to_none=True)
        losses = algo.compute_losses(batch())
        losses.parts[name].backward()
        reached = {n for n, m in (("value", algo.value), ("critic", algo.critic), ("actor", algo.actor.net))
                   if any(p.grad is not None for p in m.parameters())}  # fmt: skip
        assert reached == {name}, name


def test_the_actors_rate_follows_corls_cosine_schedule() -> None:
    algo = tiny_iql(actor_lr=0.1)
    algo.plan(8)
    rates = []
    for _ in range(9):
        algo.gradient_step(batch())
        rates.append(float(algo._actor_optim.param_groups[0]["lr"]))
    expected = [0.1 * (1 + math.cos(math.pi * k / 8)) / 2 for k in range(9)]
    assert rates == pytest.approx(expected, abs=1e-7)
    algo.plan(100)  # a resumed or extended run keeps the span it started with
    assert int(algo.schedule_span) == 8


def test_a_constant_schedule_and_a_given_span() -> None:
    constant = tiny_iql(actor_lr=0.1, actor_schedule="constant")
    constant.plan(4)
    spanned = tiny_iql(actor_lr=0.1, schedule_updates=2)
    spanned.plan(1000)
    for _ in range(3):
        constant.gradient_step(batch())
        spanned.gradient_step(batch())
    assert float(constant.actor_lr_now) == pytest.approx(0.1)
    assert float(spanned.actor_lr_now) == pytest.approx(0.1 * (1 + math.cos(math.pi * 2 / 2)) / 2, abs=1e-9)


def test_tianshous_trainer_plans_the_schedule_over_its_epochs() -> None:
    """A library script calling `run_training` itself gets the cosine over its own run, as the programs do."""
    from test_bc_math import episode_buffer
    from tianshou.trainer import OfflineTrainerParams

    algo = IQL.build(gym.spaces.Box(-10, 10, (2,), np.float32), gym.spaces.Box(-1, 1, (2,), np.float32))
    algo.run_training(
        OfflineTrainerParams(
            buffer=episode_buffer(), max_epochs=2, epoch_num_steps=3, batch_size=4, show_progress=False, verbose=False
        )
    )
    assert int(algo.schedule_span) == 6
    expected = algo.config.actor_lr * (1 + math.cos(math.pi * 5 / 6)) / 2  # the rate of the sixth update
    assert float(algo.actor_lr_now) == pytest.approx(expected, rel=1e-6)
