"""The ReLU multi-layer perceptron every vector network here is made of (actor, quantile heads,
exported policy): one builder, so their state-dict layouts stay identical (`0.weight`, `2.weight`, ...)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from offline_rl.cpu_products import dense


class ReluMLP(nn.Sequential):
    """Linear, ReLU, ..., Linear, as `nn.Sequential` holds and saves them; each Linear with the ReLU
    after it runs as one `offline_rl.cpu_products.dense` layer (oneDNN on AMD CPUs, `F.linear` elsewhere)."""

    USES_CPU_PRODUCTS = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layers = list(self)
        for index in range(0, len(layers), 2):
            linear = layers[index]
            assert isinstance(linear, nn.Linear)
            x = dense(x, linear.weight, linear.bias, relu=index + 1 < len(layers))
        return x


def relu_mlp(in_dim: int, hidden_sizes: Sequence[int], out_dim: int) -> ReluMLP:
    """Linear → ReLU for each hidden width, then a linear output layer."""
    layers: list[nn.Module] = []
    width = in_dim
    for hidden in hidden_sizes:
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, out_dim))
    return ReluMLP(*layers)
