"""Other ways to compute `EnsembleCritic`'s Q-values, to be profiled against it on a GPU.

    python benchmarks/cql_sac_profile.py --critic-layers 3 --matmul-precision high --critic-variant NAME
    python benchmarks/critic_variants.py NAME examples/d4rl_cql.py [its flags]
    python benchmarks/concurrent_runs.py --runs 1 4 --mps --critic-variant NAME

The second runs a script with every CQL-SAC it builds computing its critics the NAME way (how
`concurrent_runs.py --critic-variant` times whole runs).

Why: several runs sharing a GPU are bound by the time their updates' kernels hold every
multiprocessor, and one CQL-SAC update holds the whole GPU for about half its time: the critics'
products and elementwise passes over their 7936 rows. Each variant here computes the same Q-values
and gradients with fewer or better-aligned such passes; what a variant saves on the GPU is for
`cql_sac_profile.py` to show, and one that pays moves into `EnsembleCritic`. On a CPU they are slower
(the critics' layers leave oneDNN), so they stay out of the library until a GPU has timed them.

- `merged-first-layer`: both critics' first layers as one product, since both read the same
  (state, action) rows, with the rows' 23 columns padded to 24 so that cuBLAS may use its aligned
  kernels rather than its one-element-aligned ones (`..._align1` in the profile's table).
- `bias-in-product`: each layer's bias as one more row of its weight, multiplying a column of ones
  carried beside the layer's input (the columns padded to a multiple of 4), so that the bias
  gradient comes out of the weight-gradient product instead of a separate reduction over 7936 rows
  per layer (`triton_red_fused_sum` in the profile), and the first layer's 23 columns become 24.
- `relu-in-product`: each hidden layer's bias and ReLU applied by its product's epilogue (cuBLASLt,
  `torch._addmm_activation`) instead of an elementwise pass over the product's output
  (`triton_poi_fused_addmm_relu` in the profile); the first layer's columns padded to 24.
- `merged-relu-in-product`: the first and the third together.
- `state-projection`: the first layer split by its input's columns. Every state's rows share its
  17 observation columns (the batch's action, 10 random and 20 policy actions all scored at the same
  s), so the observation's share of the first layer is one product over the batch's 256 states,
  added to each of its 31 rows by the elementwise pass that applies the bias and ReLU; only the
  action columns (6, padded to 8) are multiplied over all 7936 rows. That replaces the two
  one-element-aligned 23-column products over 7936 rows per critic (forward and weight gradient,
  ~28 µs held per update) with aligned 8-column ones and a 256-row product, and the bias gradient's
  reduction over 7936 rows with the sum of 31 rows per state that the observation part needs
  anyway. Same function, different summation order. Built into the library's CPU path (the
  action product through oneDNN) it runs as fast as the library's form on a CPU: the product it
  saves costs what the added elementwise pass costs.
- `state-projection-relu-in-product`: the fifth with the hidden layers as in the third.
- `pointwise-first-layer`: the fifth with the actions' share written as what it is, a sum over 6
  columns, `(a.unsqueeze(-1) * W_a).sum(-2)`, rather than a product: compiled, Inductor makes the
  whole first layer one elementwise kernel over the rows (the per-state part, the 6 terms, the bias
  and the ReLU, writing its output and ReLU's mask once) and its weight gradients reductions over
  the rows, with no matrix product and no (rows, 6, 256) tensor (seen in its generated code on this
  CPU). Eager, that tensor is made: for compiled updates only.
- `pointwise-first-layer-relu-in-product`: the seventh with the hidden layers as in the third.
"""

from __future__ import annotations

import offline_rl  # noqa: F401  first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

import argparse
import runpy
import sys
from typing import Any

import torch

from offline_rl.algorithms.cql_sac import algorithm as cql_sac_algorithm
from offline_rl.algorithms.networks import EnsembleCritic, state_action_rows

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


class BiasReLUProduct(torch.autograd.Function):
    """relu(x @ weight + bias) as one cuBLASLt product with its bias and ReLU in the epilogue
    (`torch._addmm_activation`, which has no derivative of its own: the backward is written here)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        output = torch._addmm_activation(bias, x, weight)
        ctx.save_for_backward(x, weight, output)
        return output

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight, output = ctx.saved_tensors
        grad = torch.where(output > 0, grad, 0.0)
        grad_x = grad @ weight.t() if ctx.needs_input_grad[0] else None
        grad_weight = x.t() @ grad if ctx.needs_input_grad[1] else None
        grad_bias = grad.sum(dim=0) if ctx.needs_input_grad[2] else None
        return grad_x, grad_weight, grad_bias


class CriticVariant(EnsembleCritic):
    """`EnsembleCritic`'s function, its products arranged as the class attributes say.

    `merge_first_layer`: both critics' first layers as one product over the shared rows.
    `state_projection`: each critic's first layer as the states' share once per state plus the
    actions' share per row, the latter as a matrix product ("product") or as an elementwise sum of
    its few terms ("pointwise"); None: the rows' concatenated columns (wins over `merge_first_layer`).
    `bias`: "added" (a product, then the bias and ReLU in one elementwise pass, as the library runs
    on a GPU), "in-product" (a row of the weight against a column of ones) or "epilogue" (added with
    the ReLU by the product's own epilogue). Every product's inner dimension is padded to a
    multiple of `ALIGNMENT`.
    """

    merge_first_layer = False
    state_projection: str | None = None
    bias = "added"

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, *, detach_params: bool = False) -> torch.Tensor:
        batch, samples = actions.shape[0], actions.shape[1]
        layers = [
            (weight.detach(), bias.detach()) if detach_params else (weight, bias)
            for weight, bias in zip(self.weights, self.biases, strict=True)
        ]
        first_weight, first_bias = layers[0]  # (E, in, out), (E, 1, out)
        members, _, width = first_weight.shape
        if self.state_projection:
            hiddens = [
                self.projected_first_layer(obs, actions, first_weight[m], first_bias[m, 0]) for m in range(members)
            ]
        else:
            rows = state_action_rows(obs, actions)
            if self.merge_first_layer:
                merged_weight = torch.cat([first_weight[m] for m in range(members)], dim=1)
                merged_bias = torch.cat([first_bias[m, 0] for m in range(members)])
                first = self.hidden_layer(rows, merged_weight, merged_bias)
                hiddens = [first[:, m * width : (m + 1) * width] for m in range(members)]
            else:
                hiddens = [self.hidden_layer(rows, first_weight[m], first_bias[m, 0]) for m in range(members)]
        outputs = []
        for member, hidden in enumerate(hiddens):
            for weight, bias in layers[1:-1]:
                hidden = self.hidden_layer(hidden, weight[member], bias[member, 0])
            weight, bias = layers[-1]
            outputs.append(self.output_layer(hidden, weight[member, :, 0], bias[member, 0]))
        return torch.stack(outputs).view(members, batch, samples)

    def projected_first_layer(
        self, obs: torch.Tensor, actions: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
    ) -> torch.Tensor:
        """relu([s, a] @ weight + bias) for every state's K actions, as relu(s @ W_s + bias + a @ W_a):
        the state's share once per state, the actions' over all B·K rows. Rows (B·K, out)."""
        batch, samples, act_dim = actions.shape
        state_weight, action_weight = weight[: self.obs_dim], weight[self.obs_dim :]
        per_state = torch.addmm(bias, padded_columns(obs, ones=False), padded_rows(state_weight, None))  # (B, out)
        if self.state_projection == "pointwise":
            per_row = (actions.unsqueeze(-1) * action_weight).sum(dim=-2)  # (B, K, out)
        else:
            action_rows = padded_columns(actions.reshape(batch * samples, act_dim), ones=False)
            per_row = (action_rows @ padded_rows(action_weight, None)).view(batch, samples, -1)
        return (per_row + per_state.unsqueeze(1)).relu().view(batch * samples, -1)

    def hidden_layer(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """relu(x @ weight + bias), weight (in, out)."""
        if self.bias == "in-product":
            return (padded_columns(x, ones=True) @ padded_rows(weight, bias)).relu()
        x, weight = padded_columns(x, ones=False), padded_rows(weight, None)
        if self.bias == "epilogue":
            return BiasReLUProduct.apply(x, weight, bias)
        return torch.addmm(bias, x, weight).relu()

    def output_layer(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """x @ weight + bias, weight (in,), bias (1,): a matrix-vector product."""
        if self.bias == "in-product":
            return torch.mv(padded_columns(x, ones=True), padded_rows(weight.unsqueeze(1), bias)[:, 0])
        return torch.mv(x, weight) + bias


def variant(
    name: str, *, merge_first_layer: bool = False, state_projection: str | None = None, bias: str = "added"
) -> type[EnsembleCritic]:
    attributes = {"merge_first_layer": merge_first_layer, "state_projection": state_projection, "bias": bias}
    return type(name, (CriticVariant,), attributes)


VARIANTS: dict[str, type[EnsembleCritic]] = {
    "ensemble": EnsembleCritic,
    "merged-first-layer": variant("MergedFirstLayer", merge_first_layer=True),
    "bias-in-product": variant("BiasInProduct", bias="in-product"),
    "relu-in-product": variant("ReLUInProduct", bias="epilogue"),
    "merged-relu-in-product": variant("MergedReLUInProduct", merge_first_layer=True, bias="epilogue"),
    "state-projection": variant("StateProjection", state_projection="product"),
    "state-projection-relu-in-product": variant(
        "StateProjectionReLUInProduct", state_projection="product", bias="epilogue"
    ),
    "pointwise-first-layer": variant("PointwiseFirstLayer", state_projection="pointwise"),
    "pointwise-first-layer-relu-in-product": variant(
        "PointwiseFirstLayerReLUInProduct", state_projection="pointwise", bias="epilogue"
    ),
}


def use_critic_variant(algorithm: torch.nn.Module, name: str) -> None:
    """Compute the algorithm's critics and target critics the `name` way (same parameters, same state)."""
    for critic in (algorithm.critic, algorithm.critic_target):
        if not isinstance(critic, EnsembleCritic):
            raise TypeError(f"critic variants need an EnsembleCritic, got {type(critic).__name__}")
        critic.__class__ = VARIANTS[name]


def main() -> None:
    """Run a script (an example) with the critics CQL-SAC builds replaced by a variant."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("variant", choices=sorted(VARIANTS))
    parser.add_argument("script", help="the script to run, e.g. examples/d4rl_cql.py")
    args = parser.parse_args(sys.argv[1:3])  # the rest, --help included, belongs to the script
    cql_sac_algorithm.EnsembleCritic = VARIANTS[args.variant]  # what CQLSAC.build constructs
    sys.argv = [args.script, *sys.argv[3:]]
    runpy.run_path(args.script, run_name="__main__")


if __name__ == "__main__":
    main()
