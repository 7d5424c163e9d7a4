"""Quantile networks for discrete CQL: the Nature DQN CNN for Atari and an MLP for vector tasks.

Both follow Tianshou's model protocol, `obs -> (logits, state)`, with logits shaped
(batch, actions, quantiles), which `QRDQNPolicy` averages over quantiles to act greedily.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from offline_rl.algorithms.discrete_cql.config import CNN_VARIANTS
from offline_rl.algorithms.layers import relu_mlp

# (out channels, kernel, stride) of Mnih et al. (2015)'s three convolutions.
NATURE_CONVOLUTIONS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow's 'same' padding of one spatial axis: the output has ceil(size / stride) positions, and
    the zeros needed for that go half before, the odd one after (torch's own 'same' allows stride 1 only).
    """
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


class QuantileNatureCNN(nn.Module):
    """Mnih et al. (2015)'s network with a quantile head; uint8 frames are scaled to [0, 1] inside.

    `variant="nature"` builds it as Tianshou does: unpadded convolutions (84×84 frames leave 7×7×64 =
    3136 features for the 512-unit layer) and torch's initialisation. `variant="dopamine"` builds the
    same layers as Dopamine's `QuantileNetwork`, which the CQL authors' Atari code trains: TensorFlow's
    'same' padding (21×21, 11×11, 11×11: 7744 features, so a 2.5× larger 512-unit layer), and every
    weight drawn from U(±√(3s/fan_in)) with s = 1/√3 (Keras' VarianceScaling as Dopamine sets it), biases
    zero. Presets that follow that code (`configs/cql_authors/atari-*.yaml`) select it.
    """

    def __init__(
        self,
        input_shape: Sequence[int],
        num_actions: int,
        num_quantiles: int,
        *,
        scale_obs: bool = True,
        variant: str = "nature",
    ) -> None:
        super().__init__()
        if variant not in CNN_VARIANTS:
            raise ValueError(f"the CNN variant must be one of {CNN_VARIANTS}, got {variant!r}")
        in_channels, height, width = (int(size) for size in input_shape)
        self.num_actions, self.num_quantiles, self.scale_obs = num_actions, num_quantiles, scale_obs
        layers: list[nn.Module] = []
        for out_channels, kernel, stride in NATURE_CONVOLUTIONS:
            padding = (0, 0)
            if variant == "dopamine":
                top, bottom = same_padding(height, kernel, stride)
                left, right = same_padding(width, kernel, stride)
                height, width = -(-height // stride), -(-width // stride)
                # The convolution pads both sides alike; an odd zero row or column after is a layer of its
                # own (one ZeroPad2d for all of the padding is slower on a CPU: a copy per layer).
                padding = (top, left)
                if (bottom, right) != (top, left):
                    layers.append(nn.ZeroPad2d((0, right - left, 0, bottom - top)))
            layers += [nn.Conv2d(in_channels, out_channels, kernel, stride, padding), nn.ReLU(inplace=True)]
            in_channels = out_channels
        self.features = nn.Sequential(*layers, nn.Flatten())
        # oneDNN's CPU convolutions run fastest on channels-last tensors (and so do cuDNN's on GPUs).
        self.features.to(memory_format=torch.channels_last)
        with torch.no_grad():
            flat = int(self.features(torch.zeros(1, *input_shape)).shape[1])
        self.head = relu_mlp(flat, [512], num_actions * num_quantiles)
        if variant == "dopamine":
            dopamine_initialisation(self)

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


@torch.no_grad()
def dopamine_initialisation(network: nn.Module) -> None:
    """Dopamine's initialisation of its Atari networks: Keras' VarianceScaling(scale=1/√3, mode='fan_in',
    distribution='uniform'), i.e. weights from U(±√(3·(1/√3)/fan_in)) = U(±(√3/fan_in)^½), about 1.32× the
    bound of torch's default, and zero biases."""
    for module in network.modules():
        if isinstance(module, nn.Conv2d | nn.Linear):
            fan_in = module.weight[0].numel()
            bound = (3.0**0.5 / fan_in) ** 0.5
            module.weight.uniform_(-bound, bound)
            if module.bias is not None:
                module.bias.zero_()
