"""Networks every continuous algorithm shares: the observation normaliser and the critic ensemble.

The ensemble stores its critics' weights stacked, (E, in, out) per layer, so the critics are one
module with one optimiser; `forward` runs each critic as plain 2-D matrix products over all
(state, action) rows, which is what reaches the highest share of a CPU's peak (see its docstring).
With no action dimensions it is an ensemble of state-value networks V(s). `CriticModules` gives any
Tianshou critics (`(obs, act) -> Q`) the same interface, so an update runs unchanged on networks
built the Tianshou way.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from offline_rl.algorithms.layers import dense

LAYER_NORM_EPS = 1e-6


class ObservationNormalizer(nn.Module):
    """(obs - mean) / std with statistics fitted once on the dataset and saved in checkpoints.

    `fitted` is a buffer too, so a resumed run knows not to refit; the same module sits inside the
    evaluation actor, so evaluation normalises exactly as training did.
    """

    def __init__(self, obs_dim: int, *, min_std: float = 1e-3) -> None:
        super().__init__()
        self.min_std = min_std
        self.register_buffer("mean", torch.zeros(obs_dim))
        self.register_buffer("std", torch.ones(obs_dim))
        self.register_buffer("fitted", torch.zeros((), dtype=torch.bool))

    def fit(self, observations: np.ndarray | torch.Tensor) -> None:
        data = torch.as_tensor(observations, dtype=torch.float64).reshape(len(observations), -1)
        self.mean.copy_(data.mean(dim=0).to(self.mean))
        self.std.copy_(data.std(dim=0, unbiased=False).clamp_min(self.min_std).to(self.std))
        self.fitted.fill_(True)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs - self.mean) / self.std


def orthogonal_init_(module: nn.Module, *, output_gain: float = 1e-2) -> None:
    """Orthogonal weights (gain √2 for hidden layers, small gain for the output layer), zero biases."""
    linears = [m for m in module.modules() if isinstance(m, nn.Linear)]
    for index, linear in enumerate(linears):
        nn.init.orthogonal_(linear.weight, gain=output_gain if index == len(linears) - 1 else math.sqrt(2.0))
        nn.init.zeros_(linear.bias)


def state_action_rows(obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """The critics' input rows (B·K, D + A): each state beside each of its K actions (B, K, A)."""
    batch, samples = actions.shape[0], actions.shape[1]
    rows = torch.cat([obs.unsqueeze(1).expand(batch, samples, obs.shape[-1]), actions], dim=-1)
    return rows.reshape(batch * samples, -1)


class EnsembleCritic(nn.Module):
    """`num_critics` Q-networks `Q(s, a)` with identical architecture, evaluated as one batch.

    Weights are stored stacked, (E, in, out) per layer. `forward(obs, actions)` takes B states and
    K actions per state, (B, K, A), and returns Q-values (E, B, K).
    """

    USES_CPU_PRODUCTS = True  # its hidden layers run through offline_rl.algorithms.layers.dense
    # Its products are most of a CQL-SAC update, and bf16 on a CPU's AMX units runs them faster, so a CPU
    # run's start line says how.
    BF16_PRODUCTS_GAIN = True

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: Sequence[int],
        num_critics: int = 2,
        *,
        orthogonal_init: bool = True,
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        if not hidden_sizes:
            raise ValueError("EnsembleCritic needs at least one hidden layer")
        self.obs_dim, self.act_dim, self.num_critics = obs_dim, act_dim, num_critics
        self.layer_norm = layer_norm
        # With `layer_norm`, each hidden layer's ReLU output is layer-normalised with a learned scale and
        # shift per critic (ReBRAC's critics; flax's LayerNorm, ε = 1e-6).
        self.norm_scales = nn.ParameterList(
            [nn.Parameter(torch.ones(num_critics, 1, width)) for width in hidden_sizes] if layer_norm else []
        )
        self.norm_shifts = nn.ParameterList(
            [nn.Parameter(torch.zeros(num_critics, 1, width)) for width in hidden_sizes] if layer_norm else []
        )
        sizes = [obs_dim + act_dim, *hidden_sizes, 1]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for layer, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
            weight = torch.empty(num_critics, fan_in, fan_out)
            bias = torch.zeros(num_critics, 1, fan_out)
            is_output = layer == len(sizes) - 2
            for member in range(num_critics):
                if orthogonal_init:
                    member_weight = torch.empty(fan_out, fan_in)  # nn.Linear's layout
                    nn.init.orthogonal_(member_weight, gain=1e-2 if is_output else math.sqrt(2.0))
                    weight[member] = member_weight.T
                else:  # torch.nn.Linear's default initialisation
                    bound = 1.0 / math.sqrt(fan_in)
                    nn.init.uniform_(weight[member], -bound, bound)
                    nn.init.uniform_(bias[member], -bound, bound)
            self.weights.append(nn.Parameter(weight))
            self.biases.append(nn.Parameter(bias))

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, *, detach_params: bool = False) -> torch.Tensor:
        """Q-values (E, B, K) of `actions` (B, K, A) at `obs` (B, D).

        `detach_params` evaluates the critics as constants: the actor's loss then sends no gradient
        into the critics, so actor and critic losses can share one backward pass.

        Each critic runs as plain 2-D matrix products over the B·K (state, action) rows, on CPU
        and GPU alike: these reach a far higher share of peak than batched products (a batched
        product's weight gradient over thousands of rows runs as a small-tile kernel, while 2-D
        products get cuBLAS's split-K kernels), and the scalar output layer is a matrix-vector
        product, whose backward is an outer product rather than a degenerate K = 1 matrix product.
        On CPU the hidden layers' products go through `offline_rl.algorithms.layers`.
        """
        batch, samples = actions.shape[0], actions.shape[1]
        inputs = state_action_rows(obs, actions)
        outputs = [self.member_q(inputs, member, detach_params=detach_params) for member in range(self.num_critics)]
        return torch.stack(outputs).view(self.num_critics, batch, samples)

    def member_q(self, hidden: torch.Tensor, member: int, *, detach_params: bool = False) -> torch.Tensor:
        """Q-values (rows,) of one critic from its input rows."""
        layers = list(zip(self.weights, self.biases, strict=True))
        for depth, (weight, bias) in enumerate(layers[:-1]):
            w, b = weight[member], bias[member, 0]
            if detach_params:
                w, b = w.detach(), b.detach()
            hidden = dense(hidden, w.t(), b, relu=True)
            if self.layer_norm:
                scale, shift = self.norm_scales[depth][member, 0], self.norm_shifts[depth][member, 0]
                if detach_params:
                    scale, shift = scale.detach(), shift.detach()
                hidden = F.layer_norm(hidden, (hidden.shape[-1],), scale, shift, eps=LAYER_NORM_EPS)
        w, b = self.weights[-1][member, :, 0], self.biases[-1][member, 0, 0]
        if detach_params:
            w, b = w.detach(), b.detach()
        return torch.mv(hidden, w) + b

    def member_values(
        self, obs: torch.Tensor, actions: torch.Tensor, member: int, *, detach_params: bool = False
    ) -> torch.Tensor:
        """Q-values (B, K) of one critic alone (TD3's actor follows the first critic only)."""
        batch, samples = actions.shape[0], actions.shape[1]
        q = self.member_q(state_action_rows(obs, actions), member, detach_params=detach_params)
        return q.view(batch, samples)

    def clip_grad_norm_(self, max_norm: float) -> None:
        """Rescale each critic's gradient to L2 norm ≤ `max_norm`, separately, without a host sync.

        Every stored tensor is (E, ·, ·); stacked for a seed batch (`offline_rl.algorithms.seeds`) it is
        (S, E, ·, ·), and the norms are then each seed's critics' own."""
        grads = [param.grad for param in self.parameters() if param.grad is not None]
        if not grads:
            return
        squares = torch.stack([grad.flatten(-2).pow(2).sum(dim=-1) for grad in grads]).sum(dim=0)
        scale = (max_norm / (squares.sqrt() + 1e-6)).clamp(max=1.0)  # (E,), or (S, E)
        for grad in grads:
            grad.mul_(scale[..., None, None])


class CriticModules(nn.Module):
    """Separate critic modules, each `(obs, act) -> Q` of shape (rows, 1) as Tianshou's
    `ContinuousCritic`, behind `EnsembleCritic`'s interface: (B, D), (B, K, A) -> (E, B, K)."""

    def __init__(self, critics: Sequence[nn.Module], act_dim: int) -> None:
        super().__init__()
        self.members = nn.ModuleList(critics)
        self.num_critics, self.act_dim = len(critics), act_dim

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, *, detach_params: bool = False) -> torch.Tensor:
        members = range(self.num_critics)
        return torch.stack([self.member_values(obs, actions, m, detach_params=detach_params) for m in members])

    def member_values(
        self, obs: torch.Tensor, actions: torch.Tensor, member: int, *, detach_params: bool = False
    ) -> torch.Tensor:
        """Q-values (B, K) of one critic alone (TD3's actor follows the first critic only)."""
        batch, samples = actions.shape[0], actions.shape[1]
        rows_obs = obs.unsqueeze(1).expand(batch, samples, *obs.shape[1:]).reshape(batch * samples, *obs.shape[1:])
        rows_act = actions.reshape(batch * samples, -1)
        critic = self.members[member]
        if detach_params:  # the critic as a constant: gradients reach the actions only
            constants = {name: param.detach() for name, param in critic.named_parameters()}
            q = torch.func.functional_call(critic, constants, (rows_obs, rows_act))
        else:
            q = critic(rows_obs, rows_act)
        return q.reshape(batch, samples)

    def clip_grad_norm_(self, max_norm: float) -> None:
        """Rescale each critic's gradient to L2 norm ≤ `max_norm`, separately (as Tianshou's CQL does)."""
        for critic in self.members:
            nn.utils.clip_grad_norm_(critic.parameters(), max_norm)
