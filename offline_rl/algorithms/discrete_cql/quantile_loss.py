"""QR-DQN's quantile-Huber loss, in two exact forms: pairwise for GPUs, sorted for CPUs.

For each transition the loss compares every current quantile θᵢ with every target quantile Tⱼ:
Σᵢ meanⱼ |τ̂ᵢ − 1{uᵢⱼ < 0}|·Lκ(uᵢⱼ)/κ with uᵢⱼ = Tⱼ − θᵢ and τ̂ᵢ = (i + 0.5)/Nq. With Nq = 200 and a
batch of 32 that is a (32, 200, 200) table, and evaluating it pair by pair is a dozen passes over 5 MB
(forward, and backward through the broadcasts). A GPU (and torch.compile, which fuses the passes into
one kernel) does that in microseconds; on a CPU it was a fifth of a discrete CQL update on Atari frames
and most of one for a CartPole network.

The sorted form computes the same sums without the table. Once the targets of a row are sorted, the
targets that lie more than κ below θᵢ, within κ below, within κ above and more than κ above are four
consecutive runs, found by binary search; Lκ is linear in Tⱼ on the outer runs and quadratic on the
inner ones, so each run's sum of Lκ, and of its derivative, is a closed form of the run's length and
of prefix sums of Tⱼ and Tⱼ². That is O(Nq log Nq) per transition instead of O(Nq²). The prefix sums
are taken in float64 after centring each row on its median target, so the differences of large
prefix sums cost no precision: the result is at least as close to the exact value as the pairwise float32 form
(tests/test_quantile_loss.py compares both with a float64 evaluation). Lκ and its derivative are
continuous where a run ends (u = −κ, 0, κ), so which run a tie falls into does not matter.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def quantile_huber_loss(
    current: torch.Tensor, target: torch.Tensor, kappa: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """QR-DQN's loss per transition, Σᵢ meanⱼ ρ^κ_τ̂ᵢ(Tⱼ − θᵢ), and its priority for a prioritized
    buffer, meanᵢ Σⱼ Lκ(Tⱼ − θᵢ) (Tianshou's); current, target are (B, Nq), the target holds no
    gradient. Sorted on the CPU, pairwise elsewhere (see the module docstring)."""
    if current.device.type == "cpu":
        return sorted_quantile_huber_loss(current, target, kappa)
    return pairwise_quantile_huber_loss(current, target, kappa)


def pairwise_quantile_huber_loss(
    current: torch.Tensor, target: torch.Tensor, kappa: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss as written: every (θᵢ, Tⱼ) pair of the (B, Nq, Nq) table."""
    batch, num_quantiles = current.shape
    shape = (batch, num_quantiles, num_quantiles)  # (B, i, j): u_ij = T_j - θ_i
    current_ij, target_ij = current.unsqueeze(2).expand(shape), target.unsqueeze(1).expand(shape)
    huber = F.huber_loss(current_ij, target_ij, reduction="none", delta=kappa)  # one fused kernel
    # |τ̂ᵢ − 1{u_ij < 0}| is 1 − τ̂ᵢ where the target lies below the quantile, τ̂ᵢ elsewhere: one select.
    tau_i = quantile_midpoints(num_quantiles, current).view(1, -1, 1)
    weight = torch.where(target_ij < current_ij, 1.0 - tau_i, tau_i)
    loss = (weight * huber).mean(dim=2).sum(dim=1) / kappa
    return loss, huber.detach().sum(dim=2).mean(dim=1)


def sorted_quantile_huber_loss(
    current: torch.Tensor, target: torch.Tensor, kappa: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same loss and priority from sorted targets and prefix sums, without the (B, Nq, Nq) table.
    Its gradient reaches the current quantiles only, so a target that would take one is refused."""
    if target.requires_grad:
        raise ValueError("the target quantiles must be constants (computed under torch.no_grad())")
    loss, priority, _ = _SortedQuantileHuber.apply(current, target, kappa)
    return loss, priority


def quantile_midpoints(num_quantiles: int, like: torch.Tensor) -> torch.Tensor:
    """τ̂ᵢ = (i + 0.5)/Nq, the quantile levels QR-DQN's outputs estimate."""
    return (torch.arange(num_quantiles, device=like.device, dtype=like.dtype) + 0.5) / num_quantiles


class _SortedQuantileHuber(torch.autograd.Function):
    """Forward computes the loss and, in the same pass, its gradient with respect to the current
    quantiles (a (B, Nq) table), which backward only scales: no (B, Nq, Nq) tensor is kept. Written
    in torch's functorch-ready form, so that `torch.func.vmap` (a seed batch's update) batches it."""

    generate_vmap_rule = True

    @staticmethod
    def forward(current: torch.Tensor, target: torch.Tensor, kappa: float):  # type: ignore[override]
        huber_sums, huber_slopes = run_sums(current.detach(), target.detach(), kappa)  # (B, 4, Nq) each
        num_quantiles = current.shape[1]
        tau = quantile_midpoints(num_quantiles, huber_sums)
        # Targets below θᵢ (runs 0, 1) weigh 1 − τ̂ᵢ, targets above (runs 2, 3) τ̂ᵢ.
        weight = torch.stack([1.0 - tau, 1.0 - tau, tau, tau]) / (num_quantiles * kappa)  # (4, Nq)
        loss = (huber_sums * weight).sum(dim=(1, 2))
        # d Lκ(Tⱼ − θᵢ) / dθᵢ = −clamp(Tⱼ − θᵢ, −κ, κ): the slopes' weighted sum, negated.
        gradient = -(huber_slopes * weight).sum(dim=1)
        priority = huber_sums.sum(dim=1).mean(dim=1).to(current.dtype)
        return loss.to(current.dtype), priority, gradient.to(current.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def, override]
        _, priority, gradient = output
        ctx.save_for_backward(gradient)
        ctx.mark_non_differentiable(priority, gradient)

    @staticmethod
    def backward(ctx, loss_grad: torch.Tensor, _priority_grad: torch.Tensor, _gradient_grad: torch.Tensor):  # type: ignore[override]
        (gradient,) = ctx.saved_tensors
        return loss_grad.unsqueeze(1) * gradient, None, None


def run_sums(current: torch.Tensor, target: torch.Tensor, kappa: float) -> tuple[torch.Tensor, torch.Tensor]:
    """For each transition b, quantile i and run r of targets (u = Tⱼ − θᵢ below −κ, in [−κ, 0), in
    [0, κ), from κ on): Σⱼ Lκ(u) and Σⱼ clamp(u, −κ, κ) over the run, in float64, as (B, 4, Nq)."""
    batch, num_quantiles = current.shape
    targets, _ = target.double().sort(dim=1)
    centre = targets[:, num_quantiles // 2 : num_quantiles // 2 + 1]
    targets = (targets - centre).contiguous()
    theta = current.double() - centre
    zeros = targets.new_zeros(batch, 1)
    prefix = torch.cat([zeros, targets.cumsum(dim=1)], dim=1)  # prefix[k] = Σ_{j<k} T_(j)
    prefix_squares = torch.cat([zeros, (targets * targets).cumsum(dim=1)], dim=1)
    # Where each run starts: 0, then the first target ≥ θᵢ − κ, ≥ θᵢ, ≥ θᵢ + κ; the last ends at Nq.
    queries = torch.cat([theta - kappa, theta, theta + kappa], dim=1)
    bounds = torch.searchsorted(targets, queries).view(batch, 3, num_quantiles)
    bounds = torch.cat(
        [torch.zeros_like(bounds[:, :1]), bounds, torch.full_like(bounds[:, :1], num_quantiles)], dim=1
    )  # (B, 5, Nq)
    flat = bounds.view(batch, -1)
    count = bounds.diff(dim=1).to(targets.dtype)  # (B, 4, Nq) targets per run
    total = prefix.gather(1, flat).view(batch, 5, num_quantiles).diff(dim=1)  # Σ T over the run
    total_squares = prefix_squares.gather(1, flat).view(batch, 5, num_quantiles).diff(dim=1)
    theta = theta.unsqueeze(1)
    offset = total - count * theta  # Σ (Tⱼ − θᵢ) over the run
    squares = 0.5 * (total_squares - 2.0 * theta * total + count * theta.square())  # Σ ½(Tⱼ − θᵢ)²
    # Runs 1 and 2 (|u| ≤ κ): Lκ = ½u², slope u. Run 0 (u < −κ): κ(−u − κ/2), slope −κ; run 3: κ(u − κ/2), κ.
    huber = torch.cat(
        [
            kappa * (-offset[:, :1] - 0.5 * kappa * count[:, :1]),
            squares[:, 1:3],
            kappa * (offset[:, 3:] - 0.5 * kappa * count[:, 3:]),
        ],
        dim=1,
    )
    slope = torch.cat([-kappa * count[:, :1], offset[:, 1:3], kappa * count[:, 3:]], dim=1)
    return huber, slope
