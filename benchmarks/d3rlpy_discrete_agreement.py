"""Our discrete CQL (a QR-DQN head) beside d3rlpy 2.8.1's `DiscreteCQL`, on the same weights and batch.

Nothing in this update is drawn, so the quantile-Huber TD loss, the conservative term and every
gradient coordinate must match to float rounding: with the same greedy action for the target (ours
`--double-q` against d3rlpy's DiscreteCQL, ours by default against d3rlpy's plain DQN target), over an
MLP and over the Nature CNN on stacked uint8 frames, and, as a check that the comparison can fail, our
default against DiscreteCQL's double-DQN target. `d3rlpy_agreement.py` runs these cases after its
CQL-SAC ones.
"""

from __future__ import annotations

import offline_rl  # noqa: F401  first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

OBS_DIM, BATCH, GAMMA, CQL_WEIGHT = 6, 128, 0.99, 5.0
NUM_ACTIONS, NUM_QUANTILES, DISCRETE_HIDDEN = 4, 16, (32, 32)
FRAMES, PIXEL_BATCH = (4, 84, 84), 32


@dataclass(frozen=True)
class DiscreteCase:
    name: str
    double_q: bool
    """ours: the target's greedy action under the online network (`--double-q`), else the target one"""
    d3rlpy_double: bool
    """d3rlpy: DiscreteCQL's own double-DQN target, else its plain DQN's (the target network's argmax)"""
    pixels: bool = False
    """stacks of 84×84 frames through the Nature CNN (ours `--cnn nature`, d3rlpy's `PixelEncoderFactory`)"""


DISCRETE_CASES = (
    DiscreteCase("double DQN target (ours --double-q; d3rlpy DiscreteCQL's own)", True, True),
    DiscreteCase("the target network's greedy action (ours, as Dopamine's QR-DQN; d3rlpy's DQN target)", False, False),
    DiscreteCase(
        "4 stacked 84×84 frames, the Nature CNN (ours --cnn nature; d3rlpy PixelEncoderFactory)", True, True, True
    ),
    DiscreteCase("our default target against d3rlpy DiscreteCQL's (double DQN): expected to differ", False, True),
)


def build_discrete_ours(double_q: bool, pixels: bool) -> Any:
    from offline_rl.algorithms.discrete_cql import CQLQRDQN, DiscreteCQLConfig

    config = DiscreteCQLConfig(
        num_quantiles=NUM_QUANTILES,
        gamma=GAMMA,
        cql_weight=CQL_WEIGHT,
        hidden_sizes=list(DISCRETE_HIDDEN),
        double_q=double_q,
        reward_clip=False,
    )
    observations = (
        gym.spaces.Box(0, 255, FRAMES, np.uint8) if pixels else gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    )
    algorithm = CQLQRDQN.build(observations, gym.spaces.Discrete(NUM_ACTIONS), config, device="cpu")
    for parameter in algorithm.model_target.parameters():  # a target apart from the online network
        parameter.data.add_(0.3 * torch.randn_like(parameter))
    return algorithm


def build_discrete_d3rlpy(double: bool, pixels: bool) -> Any:
    import d3rlpy
    from d3rlpy.algos.qlearning.torch.dqn_impl import DQNImpl

    algo = d3rlpy.algos.DiscreteCQLConfig(
        batch_size=BATCH,
        gamma=GAMMA,
        alpha=CQL_WEIGHT,
        encoder_factory=(
            d3rlpy.models.PixelEncoderFactory()
            if pixels
            else d3rlpy.models.VectorEncoderFactory(hidden_units=list(DISCRETE_HIDDEN))
        ),
        q_func_factory=d3rlpy.models.QRQFunctionFactory(n_quantiles=NUM_QUANTILES),
    ).create(device="cpu:0")
    algo.create_impl(FRAMES if pixels else (OBS_DIM,), NUM_ACTIONS)
    impl = algo.impl
    if not double:
        impl.compute_target = DQNImpl.compute_target.__get__(impl)
    return impl


def copy_discrete_weights(ours: Any, impl: Any) -> None:
    """Layer by layer, in the order both build them: convolutions, the dense layers, the quantile head."""
    with torch.no_grad():
        for mine, theirs in (
            (ours.model, impl._modules.q_funcs[0]),
            (ours.model_target, impl._modules.targ_q_funcs[0]),
        ):
            layers = (nn.Conv2d, nn.Linear)
            ours_layers = [m for m in mine.modules() if isinstance(m, layers)]
            their_layers = [m for m in theirs.modules() if isinstance(m, layers)]
            for source, destination in zip(ours_layers, their_layers, strict=True):
                destination.weight.copy_(source.weight)
                destination.bias.copy_(source.bias)


def run_discrete_case(case: DiscreteCase, *, seed: int) -> dict[str, float]:
    """Largest |ours − d3rlpy| of each loss and of the gradient, relative to the largest |d3rlpy| value."""
    from d3rlpy.torch_utility import TorchMiniBatch

    torch.manual_seed(seed)
    ours = build_discrete_ours(case.double_q, case.pixels)
    impl = build_discrete_d3rlpy(case.d3rlpy_double, case.pixels)
    copy_discrete_weights(ours, impl)
    generator = torch.Generator().manual_seed(seed)
    size = PIXEL_BATCH if case.pixels else BATCH

    def observations() -> torch.Tensor:
        if case.pixels:  # frames as stored, uint8; ours scales them inside, d3rlpy's scaler before its network
            return torch.randint(256, (size, *FRAMES), generator=generator, dtype=torch.uint8)
        return torch.randn(size, OBS_DIM, generator=generator)

    obs, obs_next = observations(), observations()
    act = torch.randint(NUM_ACTIONS, (size,), generator=generator)
    rew = torch.randn(size, generator=generator)
    terminated = (torch.rand(size, generator=generator) < 0.2).float()
    scaled = (lambda frames: frames.float() / 255.0) if case.pixels else (lambda values: values)

    ours.model.zero_grad(set_to_none=True)
    computed = ours.compute_losses((obs, act, rew, GAMMA * (1.0 - terminated), obs_next))
    losses = computed.figures
    computed.parts["loss"].backward()
    ours_gradient = torch.cat([p.grad.reshape(-1) for p in ours.model.parameters()])

    q_function = impl._modules.q_funcs[0]
    q_function.zero_grad(set_to_none=True)
    batch = TorchMiniBatch(
        observations=scaled(obs),
        actions=act.unsqueeze(1),
        rewards=rew.unsqueeze(1),
        next_observations=scaled(obs_next),
        next_actions=torch.zeros(size, 1, dtype=torch.long),
        returns_to_go=torch.zeros(size, 1),
        terminals=terminated.unsqueeze(1),
        intervals=torch.ones(size, 1),
        device="cpu:0",
    )
    theirs = impl.compute_loss(batch, impl.compute_target(batch))
    theirs.loss.backward()
    their_gradient = torch.cat([p.grad.reshape(-1) for p in q_function.parameters()])

    def relative(mine: torch.Tensor, other: torch.Tensor) -> float:
        return float((mine.detach() - other.detach()).abs().max() / other.detach().abs().max().clamp_min(1e-12))

    return {
        "quantile-Huber TD loss": relative(losses["qr_loss"], theirs.td_loss),
        "conservative term": relative(losses["cql_loss"], theirs.conservative_loss),
        "total loss": relative(losses["loss"], theirs.loss),
        "gradient": relative(ours_gradient, their_gradient),
    }
