"""CQL-SAC's actor: a tanh-Gaussian policy, its reparameterised samples and their log-densities.

`gaussian_params` reads the pre-tanh Gaussian of either our actor or a Tianshou probabilistic one, so
the update runs unchanged on networks built the Tianshou way. The normaliser and the critics are the
shared ones (`offline_rl.algorithms.networks`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from offline_rl.algorithms.layers import relu_mlp
from offline_rl.algorithms.networks import ObservationNormalizer, orthogonal_init_

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
_LOG2 = math.log(2.0)


class TanhGaussianActor(nn.Module):
    """SAC actor: an MLP giving the mean and log-std of a Gaussian, squashed by tanh into [-1, 1].

    `forward` follows Tianshou's actor protocol, `obs -> ((loc, scale), state)`, so `SACPolicy`
    drives it for evaluation; it normalises raw observations itself. Training code calls
    `distribution_params` on observations that are already normalised.
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: Sequence[int],
        normalizer: ObservationNormalizer,
        *,
        orthogonal_init: bool = True,
        log_std_offset: float = 0.0,
    ) -> None:
        super().__init__()
        self.act_dim = act_dim
        self.log_std_offset = log_std_offset
        self.hidden_sizes = list(hidden_sizes)
        self.normalizer = normalizer
        self.net = relu_mlp(obs_dim, hidden_sizes, 2 * act_dim)
        if orthogonal_init:
            orthogonal_init_(self.net)

    def distribution_params(self, norm_obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.net(norm_obs).chunk(2, dim=-1)
        return mean, (log_std + self.log_std_offset).clamp(LOG_STD_MIN, LOG_STD_MAX)

    def forward(self, obs: Any, state: Any = None, info: Any = None) -> tuple[tuple[torch.Tensor, torch.Tensor], Any]:
        device = self.normalizer.mean.device
        obs_t = torch.as_tensor(obs, dtype=torch.float32, device=device)
        mean, log_std = self.distribution_params(self.normalizer(obs_t))
        return (mean, log_std.exp()), state


def tanh_gaussian_sample(
    mean: torch.Tensor, log_std: torch.Tensor, num_samples: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw `num_samples` squashed actions per row from one forward pass, with their log-densities.

    Returns actions (B, K, A) in (-1, 1) and log π(a|s) (B, K), reparameterised (gradients flow to
    mean and log_std). log(1 - tanh(u)²) is computed as 2·(log 2 - u - softplus(-2u)), which stays
    finite where tanh saturates.
    """
    std = log_std.exp()
    noise = torch.randn(
        (mean.shape[0], num_samples, mean.shape[1]), device=mean.device, dtype=mean.dtype, generator=generator
    )
    pre_tanh = mean.unsqueeze(1) + std.unsqueeze(1) * noise
    gaussian_log_prob = (-0.5 * noise.pow(2) - log_std.unsqueeze(1) - 0.5 * math.log(2 * math.pi)).sum(-1)
    squash_correction = (2.0 * (_LOG2 - pre_tanh - F.softplus(-2.0 * pre_tanh))).sum(-1)
    return torch.tanh(pre_tanh), gaussian_log_prob - squash_correction


def tanh_gaussian_log_prob(mean: torch.Tensor, log_std: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """log π(a|s) of given squashed actions (B, A); they must lie strictly inside (-1, 1)."""
    pre_tanh = torch.atanh(actions)
    z = (pre_tanh - mean) / log_std.exp()
    gaussian_log_prob = (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    squash_correction = (2.0 * (_LOG2 - pre_tanh - F.softplus(-2.0 * pre_tanh))).sum(-1)
    return gaussian_log_prob - squash_correction


GaussianParams = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def gaussian_params(actor: nn.Module) -> GaussianParams:
    """`obs -> (mean, log_std)` of the actor's pre-tanh Gaussian: our `TanhGaussianActor` (on
    normalised observations), or a Tianshou actor returning `((loc, scale), state)` as
    `ContinuousActorProbabilistic` does, which `SACPolicy` squashes with tanh exactly as we do."""
    if isinstance(actor, TanhGaussianActor):
        return actor.distribution_params

    def from_loc_scale(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        (loc, scale), _ = actor(obs)
        return loc, scale.log()

    return from_loc_scale
