"""The ReLU multi-layer perceptron every vector network here is made of (actor, quantile head,
exported policy): one builder, so their state-dict layouts stay identical (`0.weight`, `2.weight`, ...)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn


def relu_mlp(in_dim: int, hidden_sizes: Sequence[int], out_dim: int) -> nn.Sequential:
    """Linear → ReLU for each hidden width, then a linear output layer."""
    layers: list[nn.Module] = []
    width = in_dim
    for hidden in hidden_sizes:
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, out_dim))
    return nn.Sequential(*layers)
