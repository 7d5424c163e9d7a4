"""Other ways to compute `EnsembleCritic`'s Q-values, to be profiled against it on a GPU.

    python benchmarks/cql_sac_profile.py --critic-layers 3 --matmul-precision high --critic-variant NAME

Why: several runs sharing a GPU are bound by the time their updates' kernels hold every
multiprocessor, and one CQL-SAC update holds the whole of an H100 for ~354 µs of its ~680
(BENCHMARKS.md, "Eighth H100 session"): the critics' products and elementwise passes over their
7936 rows. Each variant here computes the same Q-values and gradients with fewer or better-aligned
such passes; what a variant saves on the GPU is for `cql_sac_profile.py` to show, and one that pays
moves into `EnsembleCritic`. On a CPU they are slower (the critics' layers leave oneDNN), so they
stay out of the library until a GPU has measured them.

- `merged-first-layer`: both critics' first layers as one product, since both read the same
  (state, action) rows, with the rows' 23 columns padded to 24 so that cuBLAS may use its aligned
  kernels rather than its one-element-aligned ones (`..._align1` in the profile's table).
- `bias-in-product`: each layer's bias as one more row of its weight, multiplying a column of ones
  carried beside the layer's input (the columns padded to a multiple of 4), so that the bias
  gradient comes out of the weight-gradient product instead of a separate reduction over 7936 rows
  per layer (`triton_red_fused_sum` in the profile), and the first layer's 23 columns become 24.
- `both`: the two together.
"""

from __future__ import annotations

import offline_rl  # noqa: F401  first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

import torch
import torch.nn.functional as F

from offline_rl.cql_sac.networks import EnsembleCritic, state_action_rows

ALIGNMENT = 4
"""Columns per 16 bytes of float32: cuBLAS's aligned kernels need row strides of a multiple of it."""


def aligned(columns: int) -> int:
    return -(-columns // ALIGNMENT) * ALIGNMENT


def padded_columns(x: torch.Tensor, *, ones: bool) -> torch.Tensor:
    """x (rows, n) widened to a multiple of `ALIGNMENT` columns: zeros, after a column of ones if `ones`."""
    columns = x.shape[1] + int(ones)
    pieces = [x]
    if ones:
        pieces.append(x.new_ones(x.shape[0], 1))
    if aligned(columns) > columns:
        pieces.append(x.new_zeros(x.shape[0], aligned(columns) - columns))
    return torch.cat(pieces, dim=1) if len(pieces) > 1 else x


def padded_rows(weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """weight (n, out), with `bias` (out,) as row n when given, widened with zero rows to match
    `padded_columns` of its input."""
    rows = weight.shape[0] + int(bias is not None)
    pieces = [weight] if bias is None else [weight, bias.unsqueeze(0)]
    if aligned(rows) > rows:
        pieces.append(weight.new_zeros(aligned(rows) - rows, weight.shape[1]))
    return torch.cat(pieces, dim=0) if len(pieces) > 1 else weight


class MergedFirstLayer(EnsembleCritic):
    """Both critics' first layers as one (rows, 24) × (24, E·256) product; the rest as `EnsembleCritic`."""

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, *, detach_params: bool = False) -> torch.Tensor:
        batch, samples = actions.shape[0], actions.shape[1]
        weight, bias = self.weights[0], self.biases[0]  # (E, in, out), (E, 1, out)
        members, fan_in, width = weight.shape
        merged_weight = weight.permute(1, 0, 2).reshape(fan_in, members * width)
        merged_bias = bias.reshape(members * width)
        if detach_params:
            merged_weight, merged_bias = merged_weight.detach(), merged_bias.detach()
        rows = padded_columns(state_action_rows(obs, actions), ones=False)
        first = torch.addmm(merged_bias, rows, padded_rows(merged_weight, None)).relu()
        outputs = [
            self.member_q(
                first[:, member * width : (member + 1) * width], member, detach_params=detach_params, from_layer=1
            )
            for member in range(members)
        ]
        return torch.stack(outputs).view(members, batch, samples)


class BiasInProduct(EnsembleCritic):
    """Every layer's bias as a row of its weight, against a column of ones beside its input."""

    merge_first_layer = False

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, *, detach_params: bool = False) -> torch.Tensor:
        batch, samples = actions.shape[0], actions.shape[1]
        layers = [
            (weight.detach(), bias.detach()) if detach_params else (weight, bias)
            for weight, bias in zip(self.weights, self.biases, strict=True)
        ]
        rows = padded_columns(state_action_rows(obs, actions), ones=True)
        first_weight, first_bias = layers[0]
        members, _, width = first_weight.shape
        if self.merge_first_layer:
            merged = torch.cat([padded_rows(first_weight[m], first_bias[m, 0]) for m in range(members)], dim=1)
            first = (rows @ merged).relu()
            hiddens = [first[:, m * width : (m + 1) * width] for m in range(members)]
        else:
            hiddens = [(rows @ padded_rows(first_weight[m], first_bias[m, 0])).relu() for m in range(members)]
        outputs = []
        for member, hidden in enumerate(hiddens):
            for weight, bias in layers[1:-1]:
                augmented = padded_columns(hidden, ones=True)
                hidden = F.relu(augmented @ padded_rows(weight[member], bias[member, 0]))
            weight, bias = layers[-1]
            output_weight = padded_rows(weight[member], bias[member, 0])[:, 0]
            outputs.append(torch.mv(padded_columns(hidden, ones=True), output_weight))
        return torch.stack(outputs).view(members, batch, samples)


class BothVariants(BiasInProduct):
    merge_first_layer = True


VARIANTS: dict[str, type[EnsembleCritic]] = {
    "ensemble": EnsembleCritic,
    "merged-first-layer": MergedFirstLayer,
    "bias-in-product": BiasInProduct,
    "both": BothVariants,
}


def use_critic_variant(algorithm: torch.nn.Module, name: str) -> None:
    """Compute the algorithm's critics and target critics the `name` way (same parameters, same state)."""
    for critic in (algorithm.critic, algorithm.critic_target):
        if not isinstance(critic, EnsembleCritic):
            raise TypeError(f"critic variants need an EnsembleCritic, got {type(critic).__name__}")
        critic.__class__ = VARIANTS[name]
