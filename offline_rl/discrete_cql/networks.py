"""Quantile networks for discrete CQL: the Nature DQN CNN for Atari and an MLP for vector tasks.

Both follow Tianshou's model protocol, `obs -> (logits, state)`, with logits shaped
(batch, actions, quantiles), which `QRDQNPolicy` averages over quantiles to act greedily.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from offline_rl.mlp import relu_mlp


class QuantileNatureCNN(nn.Module):
    """Mnih et al. (2015)'s network with a quantile head; uint8 frames are scaled to [0, 1] inside."""

    def __init__(
        self,
        input_shape: Sequence[int],
        num_actions: int,
        num_quantiles: int,
        *,
        scale_obs: bool = True,
    ) -> None:
        super().__init__()
        in_channels = int(input_shape[0])
        self.num_actions, self.num_quantiles, self.scale_obs = num_actions, num_quantiles, scale_obs
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 32, kernel_size=8, stride=4),
            nn.ReLU(inplace=True),
            nn.Conv2d(32, 64, kernel_size=4, stride=2),
            nn.ReLU(inplace=True),
            nn.Conv2d(64, 64, kernel_size=3, stride=1),
            nn.ReLU(inplace=True),
            nn.Flatten(),
        )
        # oneDNN's CPU convolutions run fastest on channels-last tensors (and so do cuDNN's on GPUs).
        self.features.to(memory_format=torch.channels_last)
        with torch.no_grad():
            flat = int(self.features(torch.zeros(1, *input_shape)).shape[1])
        self.head = relu_mlp(flat, [512], num_actions * num_quantiles)

    def forward(self, obs: Any, state: Any = None, info: Any = None) -> tuple[torch.Tensor, Any]:
        device = self.head[-1].weight.device
        # Channels-last while still one byte a value, then one pass to float32 (uint8 / 255.0 computes in
        # float32, the values of float() then /255): a third of the memory traffic of converting,
        # scaling and reordering floats. float() is a no-op then, and casts other input types.
        x = torch.as_tensor(obs, device=device).contiguous(memory_format=torch.channels_last)
        x = torch.div(x, 255.0).float() if self.scale_obs else x.float()
        logits = self.head(self.features(x))
        return logits.view(-1, self.num_actions, self.num_quantiles), state


class QuantileMLP(nn.Module):
    """A ReLU MLP with a quantile head, for vector observations (CartPole and friends)."""

    def __init__(self, obs_dim: int, num_actions: int, num_quantiles: int, hidden_sizes: Sequence[int]) -> None:
        super().__init__()
        self.num_actions, self.num_quantiles = num_actions, num_quantiles
        self.net = relu_mlp(obs_dim, hidden_sizes, num_actions * num_quantiles)

    def forward(self, obs: Any, state: Any = None, info: Any = None) -> tuple[torch.Tensor, Any]:
        device = self.net[-1].weight.device
        x = torch.as_tensor(obs, dtype=torch.float32, device=device)
        x = x.reshape(x.shape[0], -1)  # the batch size as a tensor's: an exported policy's stays free
        return self.net(x).view(-1, self.num_actions, self.num_quantiles), state
