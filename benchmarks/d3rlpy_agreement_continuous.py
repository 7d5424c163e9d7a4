"""Our TD3+BC, ReBRAC, IQL and BC losses and gradients beside d3rlpy 2.8.1's, on the same weights and batch.

    python benchmarks/d3rlpy_agreement_continuous.py [--plant NAME]

The companion of `d3rlpy_agreement.py` (CQL-SAC) for the algorithms that followed it. Each case builds
ours at small sizes (2×64 networks, 6 observation and 3 action dimensions), copies the weights into
d3rlpy's modules (the critics over the state beside the action, the deterministic actor's last layer as
d3rlpy's `_fc`, IQL's Gaussian mean as d3rlpy's `_mu`, its log σ into d3rlpy's sigmoid-squashed
parameter, V into d3rlpy's value function, the targets too), and compares on one batch:

- the critics' loss (with IQL, the value loss beside it) and the actor's loss;
- the gradients of every network, coordinate by coordinate (IQL's log σ through d3rlpy's sigmoid).

TD3's target smoothing draws noise, so its cases run with σ = 0 (the draw is the same clipped Gaussian on
both sides; `test_td3_bc_math.py` checks its clipping) and everything must match to float rounding. Where a
convention differs, the row says whose: d3rlpy sums IQL's squared TD errors over its two critics where
CORL and the IQL authors average them (a factor 2 in the critics' loss and gradient). d3rlpy's layer norm
uses PyTorch's ε = 1e-5 where the ReBRAC authors' flax (and ours) uses 1e-6, so the layer-normalised case
runs ours at 1e-5. `--plant` puts a known mistake into ours to show that the comparison catches it.

d3rlpy is not a dependency: install it beside the project as `d3rlpy_agreement.py` says.
"""

from __future__ import annotations

import offline_rl  # noqa: F401  first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

import argparse
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from d3rlpy_agreement import critic_layers, linears
from d3rlpy_baseline import quiet_d3rlpy
from torch import nn

from offline_rl.algorithms import networks
from offline_rl.algorithms.bc import BC, BCConfig
from offline_rl.algorithms.iql import IQL, IQLConfig
from offline_rl.algorithms.networks import EnsembleCritic
from offline_rl.algorithms.rebrac import ReBRAC, ReBRACConfig
from offline_rl.algorithms.staging import Transitions, TransitionsWithNextActions
from offline_rl.algorithms.td3_bc import TD3BC, TD3BCConfig

OBS_DIM, ACT_DIM, HIDDEN, BATCH, GAMMA = 6, 3, [64, 64], 128, 0.99
TOLERANCE = 1e-4
"""Relative difference below which two float32 computations of the same expression count as equal."""
D3RLPY_LOG_STD = (-5.0, 2.0)
"""The bounds of d3rlpy's IQL log σ, which it parameterises as min + sigmoid(p)·(max − min)."""


@dataclass(frozen=True)
class Comparison:
    case: str
    quantity: str
    ours: np.ndarray
    theirs: np.ndarray
    expected_ratio: float = 1.0
    """ours = ratio × theirs by a documented difference of convention"""

    @property
    def relative_difference(self) -> float:
        scale = max(float(np.abs(self.theirs).max()), 1e-12)
        return float(np.abs(self.ours - self.expected_ratio * self.theirs).max()) / scale

    @property
    def agrees(self) -> bool:
        return self.relative_difference < TOLERANCE


def spaces() -> tuple[gym.spaces.Box, gym.spaces.Box]:
    return gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32), gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32)


def d3rlpy_impl(config: str, **settings: Any) -> Any:
    import d3rlpy

    encoder = d3rlpy.models.VectorEncoderFactory(hidden_units=list(HIDDEN), use_layer_norm=settings.pop("ln", False))
    factories = {"actor_encoder_factory": d3rlpy.models.VectorEncoderFactory(hidden_units=list(HIDDEN))}
    if config != "BCConfig":
        factories["critic_encoder_factory"] = encoder
    if config == "IQLConfig":
        factories["value_encoder_factory"] = d3rlpy.models.VectorEncoderFactory(hidden_units=list(HIDDEN))
    if config == "BCConfig":
        factories = {"encoder_factory": factories["actor_encoder_factory"]}
    algo = getattr(d3rlpy.algos, config)(batch_size=BATCH, **factories, **settings).create(device="cpu:0")
    algo.create_impl((OBS_DIM,), ACT_DIM)
    return algo.impl


def layer_norms(module: nn.Module) -> list[nn.LayerNorm]:
    return [layer for layer in module.modules() if isinstance(layer, nn.LayerNorm)]


@torch.no_grad()
def copy_critics(critic: EnsembleCritic, functions: Any) -> None:
    for member, q_function in enumerate(functions):
        for (weight, bias), theirs in zip(critic_layers(critic, member), linears(q_function), strict=True):
            theirs.weight.copy_(weight)
            theirs.bias.copy_(bias)
        for depth, theirs in enumerate(layer_norms(q_function)):
            theirs.weight.copy_(critic.norm_scales[depth][member, 0])
            theirs.bias.copy_(critic.norm_shifts[depth][member, 0])


@torch.no_grad()
def copy_actor(actor: nn.Module, policy: nn.Module) -> None:
    for ours, theirs in zip(linears(actor.net), linears(policy), strict=True):
        theirs.weight.copy_(ours.weight)
        theirs.bias.copy_(ours.bias)


def copy_all(ours: Any, impl: Any) -> None:
    modules = impl._modules
    copy_actor(ours.actor, modules.imitator if hasattr(modules, "imitator") else modules.policy)
    if hasattr(modules, "targ_policy"):
        copy_actor(ours.actor, modules.targ_policy)
    if hasattr(ours, "critic"):
        copy_critics(ours.critic, modules.q_funcs)
        copy_critics(ours.critic, modules.targ_q_funcs)
        ours.critic_target.load_state_dict(ours.critic.state_dict())
    if hasattr(ours, "actor_target"):
        ours.actor_target.load_state_dict(ours.actor.state_dict())
    if hasattr(ours, "value"):
        copy_critics(ours.value, [modules.value_func])
        low, high = D3RLPY_LOG_STD
        fraction = (ours.actor.log_std.detach().clamp(low, high) - low) / (high - low)
        with torch.no_grad():
            modules.policy._logstd.copy_(torch.logit(fraction).reshape(modules.policy._logstd.shape))


@dataclass(frozen=True)
class Batch:
    obs: torch.Tensor
    act: torch.Tensor
    rew: torch.Tensor
    terminated: torch.Tensor
    obs_next: torch.Tensor
    act_next: torch.Tensor


def make_batch(seed: int = 0) -> Batch:
    generator = torch.Generator().manual_seed(seed)
    return Batch(
        obs=torch.randn(BATCH, OBS_DIM, generator=generator),
        act=torch.rand(BATCH, ACT_DIM, generator=generator).mul(1.8).sub(0.9),
        rew=torch.randn(BATCH, generator=generator),
        terminated=(torch.rand(BATCH, generator=generator) < 0.2).float(),
        obs_next=torch.randn(BATCH, OBS_DIM, generator=generator),
        act_next=torch.rand(BATCH, ACT_DIM, generator=generator).mul(1.8).sub(0.9),
    )


def ours_batch(batch: Batch, *, next_actions: bool = False) -> Any:
    transitions = Transitions(batch.obs, batch.act, batch.rew, 1.0 - batch.terminated, batch.obs_next)
    if not next_actions:
        return transitions
    return TransitionsWithNextActions(transitions, batch.act_next, torch.ones(BATCH))


def d3rlpy_batch(batch: Batch) -> Any:
    from d3rlpy.torch_utility import TorchMiniBatch

    return TorchMiniBatch(
        observations=batch.obs,
        actions=batch.act,
        rewards=batch.rew.unsqueeze(1),
        next_observations=batch.obs_next,
        next_actions=batch.act_next,
        returns_to_go=torch.zeros(BATCH, 1),
        terminals=batch.terminated.unsqueeze(1),
        intervals=torch.ones(BATCH, 1),
        device="cpu:0",
    )


def gradients(loss: torch.Tensor, parameters: list[torch.Tensor]) -> np.ndarray:
    grads = torch.autograd.grad(loss, parameters, allow_unused=True)
    return torch.cat(
        [(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, parameters, strict=True)]
    ).numpy()


def critic_parameters(critic: EnsembleCritic, member: int) -> list[torch.Tensor]:
    """Our parameters of one critic, in d3rlpy's order and (out, in) layout, as views that keep gradients."""
    flat: list[torch.Tensor] = []
    for weight, bias in critic_layers(critic, member):
        flat += [weight, bias]
    return flat


def their_critic_parameters(q_function: nn.Module) -> list[torch.Tensor]:
    return [p for layer in linears(q_function) for p in (layer.weight, layer.bias)]


def our_critic_gradient(loss: torch.Tensor, critic: EnsembleCritic) -> np.ndarray:
    grads = torch.autograd.grad(loss, list(critic.weights) + list(critic.biases), retain_graph=True)
    weights, biases = grads[: len(critic.weights)], grads[len(critic.weights) :]
    parts = []
    for member in range(critic.num_critics):
        for w, b in zip(weights, biases, strict=True):
            parts += [w[member].T.reshape(-1), b[member, 0].reshape(-1)]
    return torch.cat(parts).numpy()


def their_critic_gradient(loss: torch.Tensor, functions: Any) -> np.ndarray:
    parameters = [p for q in functions for p in their_critic_parameters(q)]
    return gradients(loss, parameters)


def actor_parameters(actor: nn.Module) -> list[torch.Tensor]:
    return [p for layer in linears(actor.net) for p in (layer.weight, layer.bias)]


def their_actor_parameters(policy: nn.Module) -> list[torch.Tensor]:
    return [p for layer in linears(policy) for p in (layer.weight, layer.bias)]


# --------------------------------------------------------------------------------------------
# the cases
def td3_like(name: str, ours: Any, impl: Any, batch: Batch, *, next_actions: bool) -> list[Comparison]:
    copy_all(ours, impl)
    mini = d3rlpy_batch(batch)
    ours_in = ours_batch(batch, next_actions=next_actions)
    critic = ours.critic_stage(ours_in, actor_step=False).parts["critic"]
    theirs_critic = impl.compute_critic_loss(mini, impl.compute_target(mini)).critic_loss
    actor = ours.actor_stage(ours_in, actor_step=True).parts["actor"]
    theirs_actor = impl.compute_actor_loss(mini, impl._modules.policy(mini.observations)).actor_loss
    return [
        Comparison(name, "critics' loss", critic.detach().numpy(), theirs_critic.detach().numpy()),
        Comparison(
            name,
            "critics' gradient",
            our_critic_gradient(critic, ours.critic),
            their_critic_gradient(theirs_critic, impl._modules.q_funcs),
        ),
        Comparison(name, "actor's loss", actor.detach().numpy(), theirs_actor.detach().numpy()),
        Comparison(
            name,
            "actor's gradient",
            gradients(actor, actor_parameters(ours.actor)),
            gradients(theirs_actor, their_actor_parameters(impl._modules.policy)),
        ),
    ]


def td3_bc_case(batch: Batch) -> list[Comparison]:
    observations, actions = spaces()
    ours = TD3BC.build(observations, actions, TD3BCConfig(hidden_sizes=HIDDEN, policy_noise=0.0, normalize_obs=False))
    impl = d3rlpy_impl("TD3PlusBCConfig", alpha=2.5, target_smoothing_sigma=0.0, gamma=GAMMA)
    return td3_like("TD3+BC (σ = 0)", ours, impl, batch, next_actions=False)


def rebrac_case(batch: Batch, layer_norm: bool) -> list[Comparison]:
    observations, actions = spaces()
    config = ReBRACConfig(
        hidden_sizes=HIDDEN, policy_noise=0.0, actor_bc_weight=0.4, critic_bc_weight=0.3,
        critic_layer_norm=layer_norm, gamma=GAMMA,
    )  # fmt: skip
    ours = ReBRAC.build(observations, actions, config)
    impl = d3rlpy_impl(
        "ReBRACConfig", actor_beta=0.4, critic_beta=0.3, target_smoothing_sigma=0.0, gamma=GAMMA, ln=layer_norm
    )
    name = "ReBRAC (σ = 0" + (", layer-normalised critics, ours at torch's ε)" if layer_norm else ")")
    epsilon = networks.LAYER_NORM_EPS
    networks.LAYER_NORM_EPS = 1e-5 if layer_norm else epsilon  # d3rlpy's torch LayerNorm; the authors' flax: 1e-6
    try:
        return td3_like(name, ours, impl, batch, next_actions=True)
    finally:
        networks.LAYER_NORM_EPS = epsilon


def iql_case(batch: Batch) -> list[Comparison]:
    observations, actions = spaces()
    config = IQLConfig(hidden_sizes=HIDDEN, expectile=0.8, temperature=2.0, max_weight=50.0, normalize_obs=False)
    ours = IQL.build(observations, actions, config)
    with torch.no_grad():
        ours.actor.log_std.copy_(torch.linspace(-0.9, 0.4, ACT_DIM))
    impl = d3rlpy_impl("IQLConfig", expectile=0.8, weight_temp=2.0, max_weight=50.0, gamma=GAMMA)
    copy_all(ours, impl)
    mini = d3rlpy_batch(batch)
    losses = ours.compute_losses(ours_batch(batch))
    theirs_critic = impl.compute_critic_loss(mini, impl.compute_target(mini))
    theirs_actor = impl.compute_actor_loss(mini, impl._modules.policy(mini.observations)).actor_loss
    name = "IQL (Gaussian actor)"
    policy = impl._modules.policy
    low, high = D3RLPY_LOG_STD
    their_actor = gradients(theirs_actor, [*their_actor_parameters(policy), policy._logstd])
    squash = torch.sigmoid(policy._logstd.detach()).reshape(-1)
    their_actor[-ACT_DIM:] /= (squash * (1 - squash) * (high - low)).numpy()  # d/dp into d/d log σ
    return [
        Comparison(name, "value loss", losses.parts["value"].detach().numpy(), theirs_critic.v_loss.detach().numpy()),
        Comparison(
            name,
            "critics' loss (d3rlpy sums over its critics; CORL and the authors average)",
            losses.parts["critic"].detach().numpy(),
            theirs_critic.q_loss.detach().numpy(),
            expected_ratio=0.5,
        ),
        Comparison(
            name,
            "critics' gradient (the same factor)",
            our_critic_gradient(losses.parts["critic"], ours.critic),
            their_critic_gradient(theirs_critic.q_loss, impl._modules.q_funcs),
            expected_ratio=0.5,
        ),
        Comparison(
            name,
            "value network's gradient",
            our_critic_gradient(losses.parts["value"], ours.value),
            gradients(theirs_critic.v_loss, their_critic_parameters(impl._modules.value_func)),
        ),
        Comparison(name, "actor's loss", losses.parts["actor"].detach().numpy(), theirs_actor.detach().numpy()),
        Comparison(
            name,
            "actor's gradient (log σ's through d3rlpy's sigmoid)",
            gradients(losses.parts["actor"], [*actor_parameters(ours.actor), ours.actor.log_std]),
            their_actor,
        ),
    ]


def bc_case(batch: Batch) -> list[Comparison]:
    observations, actions = spaces()
    ours = BC.build(observations, actions, BCConfig(hidden_sizes=HIDDEN, normalize_obs=False))
    impl = d3rlpy_impl("BCConfig", policy_type="deterministic")
    copy_all(ours, impl)
    loss = ours.compute_losses(ours_batch(batch)).parts["actor"]
    theirs = impl.compute_loss(batch.obs, batch.act).loss
    return [
        Comparison("BC", "loss", loss.detach().numpy(), theirs.detach().numpy()),
        Comparison(
            "BC",
            "actor's gradient",
            gradients(loss, actor_parameters(ours.actor)),
            gradients(theirs, their_actor_parameters(impl._modules.imitator)),
        ),
    ]


def plant(bug: str) -> None:
    """Put a known mistake into ours (`--plant`), to see the comparison catch it."""
    if bug == "td3-min-in-actor":  # TD3+BC's actor following the minimum of the critics, not the first
        TD3BC.actor_loss = lambda self, obs, act: _min_actor_loss(self, obs, act)  # type: ignore[method-assign]
    elif bug == "rebrac-no-critic-penalty":
        target = ReBRAC.penalized_target
        ReBRAC.penalized_target = lambda self, rew, nt, obs_next, na, known: target(  # type: ignore[method-assign]
            self, rew, nt, obs_next, na, torch.zeros_like(known)
        )
    elif bug == "iql-mean-not-expectile":
        IQL.value_loss = lambda self, advantage: advantage.pow(2).mean()  # type: ignore[method-assign]
    else:
        raise SystemExit(f"--plant {bug}: one of td3-min-in-actor, rebrac-no-critic-penalty, iql-mean-not-expectile")


def _min_actor_loss(self: TD3BC, obs: torch.Tensor, act: torch.Tensor) -> tuple[torch.Tensor, ...]:
    action = self.actor.action(obs)
    q = self.critic(obs, action.unsqueeze(1), detach_params=True).min(dim=0).values[:, 0]
    weight = self.config.alpha / q.abs().mean().detach()
    bc = (action - act).pow(2).mean()
    return -weight * q.mean() + bc, bc.detach(), weight, q.mean().detach()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--plant", default=None, help="td3-min-in-actor, rebrac-no-critic-penalty or iql-mean-not-expectile"
    )
    args = parser.parse_args()
    quiet_d3rlpy()
    torch.manual_seed(0)
    if args.plant:
        plant(args.plant)
    batch = make_batch()
    rows = [
        *td3_bc_case(batch),
        *rebrac_case(batch, False),
        *rebrac_case(batch, True),
        *iql_case(batch),
        *bc_case(batch),
    ]
    print("| case | quantity | ours ÷ d3rlpy expected | largest relative difference | verdict |")
    print("|---|---|---|---|---|")
    for row in rows:
        verdict = "agree" if row.agrees else "DIFFER"
        print(f"| {row.case} | {row.quantity} | {row.expected_ratio:g} | {row.relative_difference:.1e} | {verdict} |")
    differing = sum(not row.agrees for row in rows)
    print(f"\n{len(rows) - differing} of {len(rows)} comparisons agree (relative difference < {TOLERANCE:g})")


if __name__ == "__main__":
    main()
