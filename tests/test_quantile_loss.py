"""The quantile-Huber loss: the sorted form (CPU) and the pairwise form (GPU) against a float64 evaluation
of the definition, pair by pair, including the ties and run ends where the sorted form could go wrong."""

from __future__ import annotations

import math

import pytest
import torch

from offline_rl.algorithms.discrete_cql.quantile_loss import (
    pairwise_quantile_huber_loss,
    quantile_huber_loss,
    sorted_quantile_huber_loss,
)


def definition(current: torch.Tensor, target: torch.Tensor, kappa: float) -> tuple[list[float], list[float]]:
    """Loss and priority per transition from explicit loops over (i, j) in Python floats."""
    losses, priorities = [], []
    for theta_row, target_row in zip(current.tolist(), target.tolist(), strict=True):
        count = len(theta_row)
        loss = priority = 0.0
        for i, theta in enumerate(theta_row):
            tau = (i + 0.5) / count
            for value in target_row:
                u = value - theta
                huber = 0.5 * u * u if abs(u) <= kappa else kappa * (abs(u) - 0.5 * kappa)
                loss += abs(tau - (1.0 if u < 0 else 0.0)) * huber / count / kappa
                priority += huber / count
        losses.append(loss)
        priorities.append(priority)
    return losses, priorities


def gradient_of(form, current: torch.Tensor, target: torch.Tensor, kappa: float, weight: torch.Tensor):
    theta = current.clone().requires_grad_()
    loss, priority = form(theta, target, kappa)
    (loss * weight).sum().backward()
    return loss.detach(), priority, theta.grad


def float64_gradient(current: torch.Tensor, target: torch.Tensor, kappa: float, weight: torch.Tensor):
    return gradient_of(pairwise_quantile_huber_loss, current.double(), target.double(), kappa, weight.double())[2]


def awkward_batch(num_quantiles: int, kappa: float, scale: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random quantiles far from zero, plus rows whose targets tie θᵢ, θᵢ ± κ and each other."""
    generator = torch.Generator().manual_seed(seed)
    current = 40.0 + scale * torch.randn(6, num_quantiles, generator=generator)
    target = 40.0 + scale * torch.randn(6, num_quantiles, generator=generator)
    target[1] = current[1]  # every u_ii = 0
    target[2] = current[2] + kappa  # the quadratic run ends exactly on a target
    target[3] = current[3] - kappa
    target[4] = target[4, 0]  # all targets equal
    current[5] = current[5, 0]  # all quantiles equal
    return current, target


FORMS = [
    pytest.param(sorted_quantile_huber_loss, id="sorted"),
    pytest.param(pairwise_quantile_huber_loss, id="pairwise"),
]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kappa", [1.0, 0.5, 3.0])
@pytest.mark.parametrize("num_quantiles", [1, 2, 7, 200])
def test_both_forms_match_the_definition(form, kappa: float, num_quantiles: int) -> None:
    current, target = awkward_batch(num_quantiles, kappa, scale=2.0, seed=num_quantiles)
    rows = current.shape[0] if num_quantiles < 200 else 2  # the loops are slow at 200 × 200
    expected_loss, expected_priority = definition(current[:rows], target[:rows], kappa)
    loss, priority = form(current, target, kappa)
    assert loss[:rows].tolist() == pytest.approx(expected_loss, rel=1e-5, abs=1e-5)
    assert priority[:rows].tolist() == pytest.approx(expected_priority, rel=1e-5, abs=1e-5)
    assert loss.dtype == priority.dtype == current.dtype
    assert loss.shape == priority.shape == (current.shape[0],)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("scale", [0.2, 3.0, 300.0])
def test_gradients_match_a_float64_evaluation(form, scale: float) -> None:
    """Weighted per-transition losses, as a prioritized buffer's importance weights make them."""
    current, target = awkward_batch(200, 1.0, scale, seed=7)
    weight = torch.linspace(0.5, 2.0, current.shape[0])
    expected = float64_gradient(current, target, 1.0, weight)
    gradient = gradient_of(form, current, target, 1.0, weight)[2]
    assert gradient.dtype == torch.float32
    torch.testing.assert_close(gradient.double(), expected, rtol=1e-5, atol=1e-7)


def test_the_sorted_form_is_at_least_as_exact_as_the_pairwise_one() -> None:
    """The prefix sums in float64, centred on each row's median target, lose nothing to cancellation."""
    current, target = awkward_batch(200, 1.0, 5.0, seed=3)
    current, target = current + 1e6, target + 1e6  # large values, differences of a few units
    weight = torch.ones(current.shape[0])
    exact_loss = pairwise_quantile_huber_loss(current.double(), target.double(), 1.0)[0]
    exact_gradient = float64_gradient(current, target, 1.0, weight)
    errors = {}
    for name, form in (("sorted", sorted_quantile_huber_loss), ("pairwise", pairwise_quantile_huber_loss)):
        loss, _, gradient = gradient_of(form, current, target, 1.0, weight)
        errors[name] = ((loss.double() - exact_loss).abs().max(), (gradient.double() - exact_gradient).abs().max())
    assert errors["sorted"][0] <= errors["pairwise"][0] + 1e-6
    assert errors["sorted"][1] <= errors["pairwise"][1] + 1e-9


def test_the_sorted_form_keeps_no_quantile_pair_table() -> None:
    """What autograd saves for backward stays (B, Nq): the memory of the pairwise form's (B, Nq, Nq) is gone."""
    current = torch.randn(32, 200, requires_grad=True)
    target = torch.randn(32, 200)
    saved: dict[str, list[int]] = {"sorted": [], "pairwise": []}
    for name, form in (("sorted", sorted_quantile_huber_loss), ("pairwise", pairwise_quantile_huber_loss)):
        with torch.autograd.graph.saved_tensors_hooks(
            lambda t, name=name: saved[name].append(t.numel()) or t, lambda t: t
        ):
            form(current, target, 1.0)[0].sum().backward()
    assert max(saved["sorted"]) <= 32 * 200
    assert max(saved["pairwise"]) >= 32 * 200 * 200  # the check can tell the two apart


def test_the_cpu_takes_the_sorted_form() -> None:
    current = torch.randn(4, 5, requires_grad=True)
    loss, priority = quantile_huber_loss(current, torch.randn(4, 5))
    assert "SortedQuantileHuber" in type(loss.grad_fn).__name__
    assert not priority.requires_grad


def test_a_nan_quantile_makes_the_loss_nan() -> None:
    """A diverged network must not look finite to the divergence stop."""
    current, target = torch.randn(3, 8), torch.randn(3, 8)
    current[1, 4] = math.nan
    loss, priority = sorted_quantile_huber_loss(current, target, 1.0)
    assert math.isnan(loss[1].item()) and math.isnan(priority[1].item())
    assert not loss[[0, 2]].isnan().any()
    target[2, 0] = math.nan
    assert math.isnan(sorted_quantile_huber_loss(current, target, 1.0)[0][2].item())


def test_a_target_that_would_take_a_gradient_is_refused() -> None:
    """The sorted form sends no gradient to the target; it must not pretend to."""
    with pytest.raises(ValueError, match="target quantiles must be constants"):
        sorted_quantile_huber_loss(torch.randn(2, 3), torch.randn(2, 3, requires_grad=True))


@pytest.mark.usefixtures("cpu_compiler")
def test_the_sorted_form_compiles_as_one_graph() -> None:
    """torch.compile traces it whole (no graph break), as a compiled update would need, and the
    compiled loss and gradient equal the eager ones."""
    current, target = awkward_batch(20, 1.0, 2.0, seed=5)

    def mean_loss(theta: torch.Tensor) -> torch.Tensor:
        return sorted_quantile_huber_loss(theta, target, 1.0)[0].mean()

    compiled = torch.compile(mean_loss, fullgraph=True)
    results = []
    for step in (mean_loss, compiled):
        theta = current.clone().requires_grad_()
        loss = step(theta)
        loss.backward()
        results.append((loss.detach(), theta.grad))
    torch.testing.assert_close(results[1], results[0], rtol=1e-6, atol=1e-7)
